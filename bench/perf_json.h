/* A minimal JSON writer for the benchmarks' -J file: a stack of open objects and lists, a
 * separator before every item but the first. Not thread-safe: the caller serializes. */
#ifndef WEFT_BENCH_PERF_JSON_H_
#define WEFT_BENCH_PERF_JSON_H_

#include <stdio.h>

enum { PERF_JSON_DEPTH = 16 };

typedef struct {
  FILE *f; /* NULL: not writing */
  int depth, afterKey;
  char closer[PERF_JSON_DEPTH];
  int items[PERF_JSON_DEPTH];
} perfJson;

void perfJsonOpen(perfJson *j, char c); /* '{' or '[' */
void perfJsonClose(perfJson *j);        /* the innermost open one (a pending key gets null) */
void perfJsonKey(perfJson *j, const char *k);
void perfJsonStr(perfJson *j, const char *s);
void perfJsonInt(perfJson *j, long long v);
void perfJsonNum(perfJson *j, double v); /* NaN and infinities as strings, as nccl-tests */
void perfJsonNull(perfJson *j);
void perfJsonBool(perfJson *j, int v);   /* "true" / "false" strings, as nccl-tests */
void perfJsonKeyInt(perfJson *j, const char *k, long long v);
void perfJsonKeyNum(perfJson *j, const char *k, double v);
void perfJsonKeyStr(perfJson *j, const char *k, const char *v);

#endif
