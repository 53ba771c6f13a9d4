#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "param.h"

int weftLogLevel = -1;
static unsigned logSubsysMask = WEFT_ALL;
static FILE *logFile;
static int logFileErrno; /* of a WEFT_DEBUG_FILE that could not be opened */
static char logHost[64];
static pthread_once_t logOnce = PTHREAD_ONCE_INIT;
static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int logRank = -1;
static _Thread_local char threadLastError[1024];

static const struct { const char *name; unsigned bit; } subsysNames[] = {
  {"INIT", WEFT_INIT}, {"COLL", WEFT_COLL}, {"BOOT", WEFT_BOOT}, {"TOPO", WEFT_TOPO},
  {"TUNE", WEFT_TUNE}, {"SHM", WEFT_SHM},   {"TCP", WEFT_TCP},   {"ENV", WEFT_ENV},
  {"P2P", WEFT_P2P},
  {"ALL", WEFT_ALL},
};
#define NSUBSYS (sizeof subsysNames / sizeof subsysNames[0])

static const char *const levelNames[] = {"NONE", "VERSION", "WARN", "INFO", "TRACE"};
#define NLEVELS (sizeof levelNames / sizeof levelNames[0])

/* The level named by text (case-insensitive; empty is NONE), or -1. */
static int parseLevel(const char *text) {
  if (text == NULL || *text == '\0') return WEFT_LOG_NONE;
  for (size_t i = 0; i < NLEVELS; i++)
    if (strcasecmp(text, levelNames[i]) == 0) return (int)i;
  return -1;
}

int weftLogCheckLevel(const char *value, char *allowed, size_t len) {
  snprintf(allowed, len, "NONE, VERSION, WARN, INFO or TRACE");
  return value == NULL || parseLevel(value) >= 0 ? 0 : -1;
}

/* The bit of one subsystem name of n bytes, 0 if there is none. */
static unsigned subsysBit(const char *name, size_t n) {
  for (size_t i = 0; i < NSUBSYS; i++)
    if (strlen(subsysNames[i].name) == n && strncasecmp(name, subsysNames[i].name, n) == 0)
      return subsysNames[i].bit;
  return 0;
}

/* The mask of a comma list of names; 0 when any name is unknown or empty. */
static unsigned parseSubsysList(const char *spec) {
  unsigned mask = 0;
  for (const char *p = spec;; p++) {
    size_t n = strcspn(p, ",");
    unsigned bit = subsysBit(p, n);
    if (bit == 0) return 0;
    mask |= bit;
    p += n;
    if (*p == '\0') return mask;
  }
}

unsigned weftLogParseSubsys(const char *spec) {
  if (spec == NULL || *spec == '\0') return WEFT_ALL;
  int invert = spec[0] == '^';
  unsigned mask = parseSubsysList(spec + invert);
  return invert ? ~mask : mask;
}

int weftLogCheckSubsys(const char *value, char *allowed, size_t len) {
  size_t o = (size_t)snprintf(allowed, len, "a comma list of");
  for (size_t i = 0; i < NSUBSYS && o < len; i++)
    o += (size_t)snprintf(allowed + o, len - o, " %s", subsysNames[i].name);
  if (o < len) snprintf(allowed + o, len - o, ", ^ before the list to log all others");
  return value == NULL || parseSubsysList(value + (value[0] == '^')) != 0 ? 0 : -1;
}

int weftLogCheckFile(const char *value, char *allowed, size_t len) {
  weftLogInit();
  if (logFileErrno == 0) {
    snprintf(allowed, len, "a path that can be opened for writing (%%h: host, %%p: pid)");
    return 0;
  }
  snprintf(allowed, len, "a path that can be opened for writing (%%h: host, %%p: pid); "
           "opening it failed: %s", strerror(logFileErrno));
  return value == NULL ? 0 : -1;
}

void weftLogParseFilePattern(const char *pattern, const char *host, int pid, char *path,
                             size_t len) {
  if (len == 0) return;
  size_t o = 0;
  for (const char *p = pattern; *p && o + 1 < len; p++) {
    int n = 0;
    /* snprintf returns what it would have written: clamp, so o never passes the end. */
    if (p[0] == '%' && p[1] == 'h') { n = snprintf(path + o, len - o, "%s", host); p++; }
    else if (p[0] == '%' && p[1] == 'p') { n = snprintf(path + o, len - o, "%d", pid); p++; }
    else { path[o++] = *p; continue; }
    if (n < 0) break;
    o = (size_t)n < len - o ? o + (size_t)n : len - 1;
  }
  path[o] = '\0';
}

static void openLogFile(const char *pattern) {
  char path[512];
  weftLogParseFilePattern(pattern, logHost, (int)getpid(), path, sizeof path);
  FILE *f = fopen(path, "w");
  if (f != NULL) { setvbuf(f, NULL, _IOLBF, 0); logFile = f; }
  else logFileErrno = errno;
}

static void logInitOnce(void) {
  gethostname(logHost, sizeof logHost - 1);
  char *dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  logFile = stderr;
  /* A level or list that is not allowed logs nothing here: lib/settings.c refuses it. */
  int lv = parseLevel(weftParamDebug());
  if (lv < 0) lv = WEFT_LOG_NONE;
  logSubsysMask = weftLogParseSubsys(weftParamDebugSubsys());
  const char *file = weftParamDebugFile();
  if (*file) openLogFile(file);
  __atomic_store_n(&weftLogLevel, lv, __ATOMIC_RELEASE);
}

void weftLogInit(void) { pthread_once(&logOnce, logInitOnce); }

void weftLogSetRank(int rank) { logRank = rank; }

static pthread_once_t bannerOnce = PTHREAD_ONCE_INIT;
static const char *(*bannerText)(void);
/* The text is made before the log's lock is taken: making it logs (the reduction kernels' choice,
 * the runtime's), and the lock is not recursive. */
static void bannerPrint(void) {
  const char *text = bannerText();
  pthread_mutex_lock(&logLock);
  fprintf(logFile, "%s:%d:%ld [%d] WEFT %s%s\n", logHost, (int)getpid(), (long)syscall(SYS_gettid),
          logRank, weftLogLevel >= WEFT_LOG_INFO ? "INFO " : "", text);
  pthread_mutex_unlock(&logLock);
}

void weftLogBanner(const char *(*text)(void)) {
  weftLogInit();
  if (weftLogLevel < WEFT_LOG_VERSION) return;
  bannerText = text;
  pthread_once(&bannerOnce, bannerPrint);
}

int weftLogEnabled(int level, unsigned subsys) {
  if (__atomic_load_n(&weftLogLevel, __ATOMIC_ACQUIRE) < 0) weftLogInit();
  if (level > weftLogLevel) return 0;
  return level == WEFT_LOG_WARN || (subsys & logSubsysMask) != 0;
}

void weftLogWrite(int level, unsigned subsys, const char *file, int line, const char *fmt, ...) {
  (void)subsys;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  pthread_mutex_lock(&logLock);
  if (level == WEFT_LOG_TRACE)
    fprintf(logFile, "%s:%d:%ld [%d] WEFT TRACE %s:%d %s\n", logHost, (int)getpid(),
            (long)syscall(SYS_gettid), logRank, base, line, msg);
  else
    fprintf(logFile, "%s:%d:%ld [%d] WEFT %s %s\n", logHost, (int)getpid(),
            (long)syscall(SYS_gettid), logRank, level == WEFT_LOG_WARN ? "WARN" : "INFO", msg);
  pthread_mutex_unlock(&logLock);
}

static weftResult_t setErrorV(weftResult_t rc, int err, const char *fmt, va_list ap) {
  size_t n = (size_t)vsnprintf(threadLastError, sizeof threadLastError, fmt, ap);
  if (err != 0 && n < sizeof threadLastError) {
    char ebuf[128];
    const char *etext = strerror_r(err, ebuf, sizeof ebuf);
    snprintf(threadLastError + n, sizeof threadLastError - n, ": %s", etext);
  }
  WARN("%s", threadLastError);
  return rc;
}

weftResult_t weftSetError(weftResult_t rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  setErrorV(rc, 0, fmt, ap);
  va_end(ap);
  return rc;
}

weftResult_t weftSetSysError(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  setErrorV(weftSystemError, err, fmt, ap);
  va_end(ap);
  return weftSystemError;
}

const char *weftThreadLastError(void) { return threadLastError; }
void weftClearThreadError(void) { threadLastError[0] = '\0'; }
