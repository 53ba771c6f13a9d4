/* The JSON writer (see perf_json.h). */
#include "perf_json.h"

#include <math.h>
#include <stdlib.h>

static void jsonItem(perfJson *j) {
  if (j->afterKey) {
    j->afterKey = 0;
  } else if (j->depth > 0) {
    if (j->items[j->depth - 1]++) fputc(',', j->f);
  }
}

static void jsonQuoted(perfJson *j, const char *s) {
  fputc('"', j->f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(j->f, "\\%c", *p);
    else if (*p < 0x20) fprintf(j->f, "\\u%04x", *p);
    else fputc(*p, j->f);
  }
  fputc('"', j->f);
}

void perfJsonOpen(perfJson *j, char c) {
  jsonItem(j);
  fputc(c, j->f);
  if (j->depth == PERF_JSON_DEPTH) abort(); /* a bug: the layout is fixed and shallow */
  j->closer[j->depth] = c == '{' ? '}' : ']';
  j->items[j->depth++] = 0;
}

void perfJsonClose(perfJson *j) {
  if (j->afterKey) { /* a key without its value: null */
    fputs("null", j->f);
    j->afterKey = 0;
  }
  fputc(j->closer[--j->depth], j->f);
}

void perfJsonKey(perfJson *j, const char *k) {
  jsonItem(j);
  jsonQuoted(j, k);
  fputc(':', j->f);
  j->afterKey = 1;
}

void perfJsonStr(perfJson *j, const char *s) {
  jsonItem(j);
  jsonQuoted(j, s);
}

void perfJsonInt(perfJson *j, long long v) {
  jsonItem(j);
  fprintf(j->f, "%lld", v);
}

void perfJsonNum(perfJson *j, double v) {
  jsonItem(j);
  if (isfinite(v)) fprintf(j->f, "%.9g", v);
  else jsonQuoted(j, isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"); /* JSON has no such numbers */
}

void perfJsonNull(perfJson *j) {
  jsonItem(j);
  fputs("null", j->f);
}

/* nccl-tests writes its booleans as the strings "true" and "false"; so do we, for its readers. */
void perfJsonBool(perfJson *j, int v) {
  perfJsonStr(j, v ? "true" : "false");
}

void perfJsonKeyInt(perfJson *j, const char *k, long long v) {
  perfJsonKey(j, k);
  perfJsonInt(j, v);
}

void perfJsonKeyNum(perfJson *j, const char *k, double v) {
  perfJsonKey(j, k);
  perfJsonNum(j, v);
}

void perfJsonKeyStr(perfJson *j, const char *k, const char *v) {
  perfJsonKey(j, k);
  perfJsonStr(j, v);
}
