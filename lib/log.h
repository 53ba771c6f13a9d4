/* Logging and error reporting. WEFT_DEBUG=NONE|VERSION|WARN|INFO|TRACE,
 * WEFT_DEBUG_SUBSYS=INIT,COLL,..., WEFT_DEBUG_FILE. Lines start "host:pid:tid [rank] WEFT". */
#ifndef WEFT_LOG_H_
#define WEFT_LOG_H_

#include <stdarg.h>
#include <stddef.h>
#include "weft.h"

/* VERSION prints the version banner and nothing else; each level above adds to the one below. */
enum weftLogLevel {
  WEFT_LOG_NONE = 0, WEFT_LOG_VERSION = 1, WEFT_LOG_WARN = 2, WEFT_LOG_INFO = 3, WEFT_LOG_TRACE = 4
};

/* A subsystem gets a bit (and a name in log.c) when code logs under it. */
enum weftSubsys {
  WEFT_INIT = 1u << 0, WEFT_COLL = 1u << 1, WEFT_BOOT = 1u << 2, WEFT_TOPO = 1u << 3,
  WEFT_TUNE = 1u << 4, WEFT_SHM = 1u << 5, WEFT_TCP = 1u << 6, WEFT_ENV = 1u << 7,
  WEFT_P2P = 1u << 8,
  WEFT_ALL = ~0u
};

extern int weftLogLevel; /* -1 until the environment is read */
void weftLogInit(void);
void weftLogWrite(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int weftLogEnabled(int level, unsigned subsys);
/* The rank printed in log lines of this thread (-1: none yet). */
void weftLogSetRank(int rank);
/* Prints the version banner once per process, at level VERSION and above; text makes it only
 * then (it asks the accelerator runtime for its devices, which no process should pay for, nor
 * start CUDA in, just to leave the banner unprinted). */
void weftLogBanner(const char *(*text)(void));
/* Checks of WEFT_DEBUG, WEFT_DEBUG_SUBSYS and WEFT_DEBUG_FILE (weftParamCheckFn, param.h). The
 * log reads them once per process; the file check fails when that open failed. */
int weftLogCheckLevel(const char *value, char *allowed, size_t len);
int weftLogCheckSubsys(const char *value, char *allowed, size_t len);
int weftLogCheckFile(const char *value, char *allowed, size_t len);

#define WEFT_LOG(level, subsys, ...)                                         \
  do {                                                                       \
    if (weftLogLevel != 0 && weftLogEnabled((level), (subsys)))              \
      weftLogWrite((level), (subsys), __FILE__, __LINE__, __VA_ARGS__);      \
  } while (0)
#define WARN(...) WEFT_LOG(WEFT_LOG_WARN, WEFT_ALL, __VA_ARGS__)
#define INFO(subsys, ...) WEFT_LOG(WEFT_LOG_INFO, (subsys), __VA_ARGS__)
#define TRACE(subsys, ...) WEFT_LOG(WEFT_LOG_TRACE, (subsys), __VA_ARGS__)

/* Records the message as this thread's last error, logs it once at WARN, returns rc.
 * Call it at the first place that detects an error; callers above only propagate. */
weftResult_t weftSetError(weftResult_t rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same, with ": <strerror(err)>" appended. */
weftResult_t weftSetSysError(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parsers of the environment (internal; exposed for tests/fuzz). WEFT_DEBUG_SUBSYS: the mask of
 * a comma list of subsystem names, "^" inverting it; WEFT_DEBUG_FILE: pattern with %h (host)
 * and %p (pid) expanded into path, truncated to len - 1 bytes and always NUL-terminated. */
unsigned weftLogParseSubsys(const char *spec);
void weftLogParseFilePattern(const char *pattern, const char *host, int pid, char *path,
                             size_t len);
const char *weftThreadLastError(void);
void weftClearThreadError(void);

#endif
