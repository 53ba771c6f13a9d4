#include "log.h"

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
static char logHost[64];
static pthread_once_t logOnce = PTHREAD_ONCE_INIT;
static pthread_mutex_t logLock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int logRank = -1;
static _Thread_local char threadLastError[1024];

static const struct { const char *name; unsigned bit; } subsysNames[] = {
  {"INIT", WEFT_INIT}, {"COLL", WEFT_COLL}, {"BOOT", WEFT_BOOT}, {"TOPO", WEFT_TOPO},
  {"TUNE", WEFT_TUNE}, {"SHM", WEFT_SHM},   {"TCP", WEFT_TCP},   {"IB", WEFT_IB},
  {"IPC", WEFT_IPC},   {"ENV", WEFT_ENV},   {"ALL", WEFT_ALL},
};

unsigned weftLogParseSubsys(const char *spec) {
  if (spec == NULL || *spec == '\0') return WEFT_ALL;
  int invert = spec[0] == '^';
  if (invert) spec++;
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof subsysNames / sizeof subsysNames[0]; i++)
      if (strcasecmp(tok, subsysNames[i].name) == 0) mask |= subsysNames[i].bit;
  }
  return invert ? ~mask : mask;
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
}

static void logInitOnce(void) {
  gethostname(logHost, sizeof logHost - 1);
  char *dot = strchr(logHost, '.');
  if (dot) *dot = '\0';
  logFile = stderr;
  const char *level = weftParamDebug();
  int lv = WEFT_LOG_NONE;
  if (strcasecmp(level, "WARN") == 0) lv = WEFT_LOG_WARN;
  else if (strcasecmp(level, "INFO") == 0) lv = WEFT_LOG_INFO;
  else if (strcasecmp(level, "TRACE") == 0) lv = WEFT_LOG_TRACE;
  logSubsysMask = weftLogParseSubsys(weftParamDebugSubsys());
  const char *file = weftParamDebugFile();
  if (*file) openLogFile(file);
  __atomic_store_n(&weftLogLevel, lv, __ATOMIC_RELEASE);
}

void weftLogInit(void) { pthread_once(&logOnce, logInitOnce); }

void weftLogSetRank(int rank) { logRank = rank; }

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
