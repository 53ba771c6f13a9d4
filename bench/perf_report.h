/* What the benchmarks print: nccl-tests' header, table and footer on stdout, and with -J the
 * same results as nccl-tests' JSON file (its version 3 layout: config, devices, one object per
 * row with out_of_place / in_place and, with -I, their per-iteration statistics). Only world
 * rank 0's first thread prints (the printer); perfPrintDevices is collective over processes. */
#ifndef WEFT_BENCH_PERF_REPORT_H_
#define WEFT_BENCH_PERF_REPORT_H_

#include <stddef.h>

#include "perf_device.h"
#include "perf_opts.h"
#include "perf_team.h"

typedef struct {
  double min, max, avg, p50, p95, p99, stdev, cvPct; /* seconds, except cvPct */
} perfIterStats;

/* Statistics of t[0..n), n >= 1; percentiles by nearest rank, as nccl-tests. */
void perfIterStatsOf(const double *t, int n, perfIterStats *s);

/* -J: opens the file (never overwriting: FILE, else FILE.0, FILE.1, ...) and writes the run's
 * identity; says on stdout where it writes, or why it does not. */
void perfReportOpen(const perfOpts *o, int argc, char **argv, const char *library);
/* notes: NULL-terminated, a "# " line each after the library's. */
void perfPrintHeader(const perfOpts *o, const char *library, const char *const *notes, const perfMemory *mem);
/* "# Links": every rank's line from links(ctx, ...) (collective over the ranks), in rank order. */
void perfPrintLinks(perfTeam *t, int tid, void (*links)(void *ctx, char *line, size_t len), void *ctx);
/* "# Using devices": each rank's device (host buffers: device 0 [cpu]). */
void perfPrintDevices(int nThreads, const perfWorld *w, const perfMemory *mem);
void perfPrintTableHeader(const perfOpts *o);
/* A "#" line, on stdout only. */
void perfPrintNote(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One row: start, out of place then in place (time, then -I's statistics), end. */
void perfRowStart(size_t bytes, size_t count, const char *type, const char *op, int root);
void perfRowTime(const perfOpts *o, int inPlace, double usec, double algbw, double busbw, long long wrong);
/* A placement the collective has no form of: N/A in its columns (JSON: null). */
void perfRowNone(const perfOpts *o, int inPlace);
/* sec: the n iterations' times (max over ranks); rows: each process's, nRows x n, or NULL. */
void perfRowIters(const perfOpts *o, int inPlace, const double *sec, int n, const double *rows, int nRows);
void perfRowEnd(const perfOpts *o, const char *algo);

void perfPrintFooter(int errors, double avgBusBw);
/* -M: bytes per process (the largest over processes). */
void perfPrintMemory(double init, double user, double coll);
void perfReportClose(void);
/* From any thread, when the run is being ended: ends an open row, writes why into the JSON
 * file and closes it, so that what it holds stays valid JSON. */
void perfReportAbort(const char *why);

#endif
