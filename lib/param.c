#include "param.h"

#include <ctype.h>
#include <errno.h>
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

static int64_t paramInt(const char *env, int64_t deflt) {
  const char *text = getenv(env);
  if (text == NULL || *text == '\0') return deflt;
  int64_t v;
  if (weftParseInt(text, &v) != 0) {
    WARN("%s=\"%s\" is not an integer; using the default %lld", env, text, (long long)deflt);
    return deflt;
  }
  INFO(WEFT_ENV, "%s set to %lld", env, (long long)v);
  return v;
}

static const char *paramStr(const char *env, const char *deflt) {
  const char *text = getenv(env);
  return (text == NULL || *text == '\0') ? deflt : text;
}

#define WEFT_PARAM_INT(name, env, deflt, help) \
  int64_t weftParam##name(void) { return paramInt(env, deflt); }
#define WEFT_PARAM_STR(name, env, deflt, help) \
  const char *weftParam##name(void) { return paramStr(env, deflt); }
#include "params.def"
#undef WEFT_PARAM_INT
#undef WEFT_PARAM_STR

void weftParamsPrint(FILE *out) {
  fprintf(out, "| Variable | Default | Meaning |\n|---|---|---|\n");
#define WEFT_PARAM_INT(name, env, deflt, help) fprintf(out, "| `%s` | %lld | %s |\n", env, (long long)(deflt), help);
#define WEFT_PARAM_STR(name, env, deflt, help) \
  fprintf(out, "| `%s` | %s | %s |\n", env, *(deflt) ? "`" deflt "`" : "(unset)", help);
#include "params.def"
#undef WEFT_PARAM_INT
#undef WEFT_PARAM_STR
}
