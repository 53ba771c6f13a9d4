/* Every WEFT_* setting at once: checked before the library acts on any (a value not allowed is
 * weftInvalidArgument, never replaced by the default), and listed, for weft-info and
 * docs/env.md, from the one declaration of each in lib/params.def. */
#ifndef WEFT_SETTINGS_H_
#define WEFT_SETTINGS_H_

#include <stdint.h>
#include <stdio.h>
#include "param.h"
#include "weft.h"

struct weftParamInfo {
  const char *env, *help;
  int isInt;
  int64_t deflt, min, max, step; /* integers */
  const char *defltText;         /* text */
  weftParamCheckFn check;        /* NULL: the range (integers) or any text */
};
extern const struct weftParamInfo weftParamTable[];
extern const int weftParamTableCount;

/* Checks every parameter's value in the environment; the first call of a process also prints
 * the version banner (WEFT_DEBUG=VERSION and above). api names the caller in the message,
 * which lists every value not allowed with what is allowed. */
weftResult_t weftSettingsCheck(const char *api);
/* 0 when text is one of p's allowed values. */
int weftSettingsValueOk(const struct weftParamInfo *p, const char *text);
/* What p allows, in words ("an integer from 1 to 2147483647", "AF_INET or AF_INET6"). */
void weftParamAllowed(const struct weftParamInfo *p, char *buf, size_t len);
/* p's default as text ("300000", "" when unset). */
void weftParamDefault(const struct weftParamInfo *p, char *buf, size_t len);
/* docs/env.md's table: a markdown row per parameter (variable, default, allowed, meaning). */
void weftParamsPrintMarkdown(FILE *out);

#endif
