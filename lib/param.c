#include "param.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

int weftParseInt(const char *text, int64_t *value) {
  if (text == NULL) return -1;
  while (isspace((unsigned char)*text)) text++;
  if (*text == '\0') return -1;
  errno = 0;
  char *end = NULL;
  long long v = strtoll(text, &end, 0);
  if (errno != 0 || end == text) return -1;
  int64_t mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1LL << 10; end++; break;
    case 'M': mult = 1LL << 20; end++; break;
    case 'G': mult = 1LL << 30; end++; break;
    default: break;
  }
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  if (v > INT64_MAX / mult || v < INT64_MIN / mult) return -1;
  *value = (int64_t)v * mult;
  return 0;
}

int weftParseNumber(const char *text, double *value) {
  if (text == NULL) return -1;
  while (isspace((unsigned char)*text)) text++;
  if (*text == '\0') return -1;
  errno = 0;
  char *end = NULL;
  double v = strtod(text, &end);
  if (errno != 0 || end == text) return -1;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0' || !isfinite(v)) return -1;
  *value = v;
  return 0;
}

int weftParamCheckPositive(const char *value, char *allowed, size_t len) {
  snprintf(allowed, len, "a number > 0");
  double v;
  return value == NULL || (weftParseNumber(value, &v) == 0 && v > 0) ? 0 : -1;
}

int weftParamCheckNonNegative(const char *value, char *allowed, size_t len) {
  snprintf(allowed, len, "a number >= 0");
  double v;
  return value == NULL || (weftParseNumber(value, &v) == 0 && v >= 0) ? 0 : -1;
}

const char *weftParamText(const char *env) {
  const char *text = getenv(env);
  return text == NULL || *text == '\0' ? NULL : text;
}

/* lib/settings.c refused any value outside the declaration before the library read it; one that
 * fails here was set after that check (by another thread, during init). */
static int64_t paramInt(const char *env, int64_t deflt, int64_t min, int64_t max, int64_t step) {
  const char *text = weftParamText(env);
  if (text == NULL) return deflt;
  int64_t v;
  if (weftParseInt(text, &v) != 0 || v < min || v > max || v % step != 0) {
    WARN("%s=\"%s\" was changed to a value not allowed after it was checked; using %lld", env,
         text, (long long)deflt);
    return deflt;
  }
  return v;
}

static const char *paramStr(const char *env, const char *deflt) {
  const char *text = weftParamText(env);
  return text == NULL ? deflt : text;
}

#define WEFT_PARAM_INT(name, env, deflt, min, max, step, check, help) \
  int64_t weftParam##name(void) { return paramInt(env, deflt, min, max, step); }
#define WEFT_PARAM_STR(name, env, deflt, check, help) \
  const char *weftParam##name(void) { return paramStr(env, deflt); }
#include "params.def"
#undef WEFT_PARAM_INT
#undef WEFT_PARAM_STR
