/* Checks and lists every WEFT_* setting from its declaration (lib/params.def). The checks live
 * beside the code that reads each value (log, socket, tuner, transports, reductions); this file
 * only gathers them, so it sits above them, at the API. */
#include "settings.h"

#include <stdlib.h>
#include <string.h>

#include "algospec.h"
#include "core.h"
#include "log.h"
#include "reduce.h"
#include "socket.h"
#include "topo.h"
#include "version.h"

extern char **environ;

const struct weftParamInfo weftParamTable[] = {
#define WEFT_PARAM_INT(name, env, deflt, min, max, step, check, help) \
  {env, help, 1, deflt, min, max, step, "", check},
#define WEFT_PARAM_STR(name, env, deflt, check, help) {env, help, 0, 0, 0, 0, 1, deflt, check},
#include "params.def"
#undef WEFT_PARAM_INT
#undef WEFT_PARAM_STR
};
const int weftParamTableCount = (int)(sizeof weftParamTable / sizeof weftParamTable[0]);

/* 1073741824 as "1G", 65536 as "64K": how the values are usually written. */
static void intText(int64_t v, char *buf, size_t len) {
  static const struct { int shift; char suffix; } units[] = {{30, 'G'}, {20, 'M'}, {10, 'K'}};
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
    int64_t unit = (int64_t)1 << units[i].shift;
    if (v != 0 && v % unit == 0 && v != INT64_MAX) {
      snprintf(buf, len, "%lld%c", (long long)(v / unit), units[i].suffix);
      return;
    }
  }
  snprintf(buf, len, "%lld", (long long)v);
}

void weftParamAllowed(const struct weftParamInfo *p, char *buf, size_t len) {
  if (!p->isInt) {
    if (p->check != NULL) p->check(NULL, buf, len);
    else snprintf(buf, len, "any text");
    return;
  }
  if (p->check != NULL) {
    p->check(NULL, buf, len);
    return;
  }
  char lo[32], hi[32];
  intText(p->min, lo, sizeof lo);
  intText(p->max, hi, sizeof hi);
  if (p->max - p->min == 1) snprintf(buf, len, "%s or %s", lo, hi);
  else if (p->max == INT64_MAX) snprintf(buf, len, "an integer >= %s", lo);
  else snprintf(buf, len, "an integer from %s to %s", lo, hi);
  if (p->step > 1) {
    size_t o = strlen(buf);
    snprintf(buf + o, len - o, ", a multiple of %lld", (long long)p->step);
  }
}

void weftParamDefault(const struct weftParamInfo *p, char *buf, size_t len) {
  if (p->isInt) snprintf(buf, len, "%lld", (long long)p->deflt);
  else snprintf(buf, len, "%s", p->defltText);
}

int weftSettingsValueOk(const struct weftParamInfo *p, const char *text) {
  char allowed[256];
  if (p->isInt) {
    int64_t v;
    if (weftParseInt(text, &v) != 0 || v < p->min || v > p->max || v % p->step != 0) return -1;
  }
  return p->check != NULL ? p->check(text, allowed, sizeof allowed) : 0;
}

/* INFO ENV: a WEFT_ variable that is no setting of this library (a typo, or another tool's). */
static void noteUnknownVariables(void) {
  if (!weftLogEnabled(WEFT_LOG_INFO, WEFT_ENV)) return;
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    if (strncmp(*e, "WEFT_", 5) != 0) continue;
    size_t n = strcspn(*e, "=");
    int known = 0;
    for (int i = 0; i < weftParamTableCount && !known; i++)
      known = strlen(weftParamTable[i].env) == n && strncmp(*e, weftParamTable[i].env, n) == 0;
    if (!known) INFO(WEFT_ENV, "%.*s is not a setting of weft %s (ignored)", (int)n, *e, WEFT_VERSION_TEXT);
  }
}

weftResult_t weftSettingsCheck(const char *api) {
  char msg[1024];
  size_t o = 0;
  int bad = 0;
  for (int i = 0; i < weftParamTableCount; i++) {
    const struct weftParamInfo *p = &weftParamTable[i];
    const char *text = weftParamText(p->env);
    if (text == NULL) continue;
    if (weftSettingsValueOk(p, text) == 0) {
      INFO(WEFT_ENV, "%s set by environment to %s", p->env, text);
      continue;
    }
    char allowed[256];
    if (p->check != NULL) p->check(text, allowed, sizeof allowed); /* says what is wrong, too */
    else weftParamAllowed(p, allowed, sizeof allowed);
    if (o < sizeof msg)
      o += (size_t)snprintf(msg + o, sizeof msg - o, "%s%s=\"%s\" is not allowed (allowed: %s)",
                            bad++ ? "; " : "", p->env, text, allowed);
  }
  if (bad) return weftSetError(weftInvalidArgument, "%s: %s", api, msg);
  noteUnknownVariables();
  weftLogBanner(weftVersionBanner);
  return weftSuccess;
}

void weftParamsPrintMarkdown(FILE *out) {
  fprintf(out, "| Variable | Default | Allowed | Meaning |\n|---|---|---|---|\n");
  for (int i = 0; i < weftParamTableCount; i++) {
    const struct weftParamInfo *p = &weftParamTable[i];
    char deflt[64], allowed[256];
    weftParamDefault(p, deflt, sizeof deflt);
    weftParamAllowed(p, allowed, sizeof allowed);
    if (deflt[0] == '\0') fprintf(out, "| `%s` | (unset) | %s | %s |\n", p->env, allowed, p->help);
    else fprintf(out, "| `%s` | `%s` | %s | %s |\n", p->env, deflt, allowed, p->help);
  }
}
