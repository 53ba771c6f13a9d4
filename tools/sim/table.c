/* weft-sim's tables: per collective, rank count and size, each algorithm's simulated time and
 * bus bandwidth, the tuner's choice (lib/tune.c on the simulated communicator, from the
 * algorithms' own cost()) and the simulated best; then where the best changes (crossovers)
 * and where the tuner's choice is not the simulated best. Also the cost of one straggler. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "table.h"

static void humanBytes(char *buf, size_t len, size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) snprintf(buf, len, "%zuGiB", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(buf, len, "%zuMiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) snprintf(buf, len, "%zuKiB", b >> 10);
  else snprintf(buf, len, "%zuB", b);
}

/* One simulated time, or NAN with why (too big for exact mode, not runnable, ...). */
double simCell(struct simComm *c, enum simAlgo algo, const struct simCall *call, int mode,
               int exactLimit, int calls, const struct simOptions *extra, char *why, size_t len) {
  if (!simAlgoRuns(c, algo, call->coll, why, len)) return NAN;
  int n = simCommRanks(c);
  if (call->coll != weftCollAllReduce && call->bytes / sizeof(float) < (size_t)n) {
    snprintf(why, len, "%zu bytes hold less than one float32 per rank", call->bytes);
    return NAN;
  }
  struct simOptions o = {0, -1, 1, -1, 0, NULL, calls};
  if (extra != NULL) o = *extra;
  o.calls = calls;
  struct simResult r;
  o.symmetric = mode == SIM_MODE_SYMMETRIC || (mode == SIM_MODE_AUTO && n > exactLimit);
  if (simRun(c, algo, call, &o, &r, why, len) == 0) return r.timeUs;
  if (mode != SIM_MODE_AUTO || !o.symmetric) return NAN;
  char symWhy[256]; /* no symmetric mode for it: exact, if it fits */
  snprintf(symWhy, sizeof symWhy, "%s", why);
  o.symmetric = 0;
  if (simRun(c, algo, call, &o, &r, why, len) == 0) return r.timeUs;
  char exactWhy[256];
  snprintf(exactWhy, sizeof exactWhy, "%s", why);
  snprintf(why, len, "%s; exact: %s", symWhy, exactWhy);
  return NAN;
}

static void printHeader(FILE *out, const struct simTableSpec *s, weftColl_t coll) {
  fprintf(out, "\n# %s on %s (%d per host): time in us, busbw in GB/s (nccl-tests' bus factor)\n",
          weftCollName(coll), s->f->name, s->f->gpus);
  fprintf(out, "%8s %9s", "ranks", "bytes");
  for (int a = 0; a < SIM_ALGOS; a++)
    if (s->algos & (1u << a)) fprintf(out, " %11s %7s", simAlgoNames[a], "busbw");
  fprintf(out, "  %-6s %11s  %s\n", "tuner", "its cost()", "best");
}

struct row {
  double t[SIM_ALGOS];
  int best, tuner;
};

static void simulateRow(const struct simTableSpec *s, struct simComm *c, const struct simCall *call,
                        struct row *row, FILE *notes) {
  row->best = -1;
  for (int a = 0; a < SIM_ALGOS; a++) {
    char why[256];
    row->t[a] = NAN;
    if (!(s->algos & (1u << a))) continue;
    row->t[a] = simCell(c, (enum simAlgo)a, call, s->mode, s->exactLimit, s->calls, NULL, why, sizeof why);
    if (isnan(row->t[a]) && strstr(why, "does not run") == NULL && strstr(why, "needs 2") == NULL &&
        strstr(why, "less than one float32") == NULL)
      fprintf(notes, "#   %s: %s\n", simAlgoNames[a], why);
    if (!isnan(row->t[a]) && (row->best < 0 || row->t[a] < row->t[row->best])) row->best = a;
  }
  row->tuner = simTunerChoice(c, call);
}

static void printRow(FILE *out, const struct simTableSpec *s, struct simComm *c,
                     const struct simCall *call, const struct row *row) {
  int n = simCommRanks(c);
  char size[32];
  humanBytes(size, sizeof size, call->bytes);
  fprintf(out, "%8d %9s", n, size);
  for (int a = 0; a < SIM_ALGOS; a++) {
    if (!(s->algos & (1u << a))) continue;
    if (isnan(row->t[a])) fprintf(out, " %11s %7s", "-", "-");
    else
      fprintf(out, " %11.2f %7.2f", row->t[a],
              (double)call->bytes / (row->t[a] * 1e3) * simBusFactor(call->coll, n));
  }
  if (row->tuner >= 0)
    fprintf(out, "  %-6s %11.2f", simAlgoNames[row->tuner],
            simAlgoCost(c, (enum simAlgo)row->tuner, call));
  else fprintf(out, "  %-6s %11s", "-", "-");
  fprintf(out, "  %s%s\n", row->best >= 0 ? simAlgoNames[row->best] : "-",
          row->tuner >= 0 && row->best >= 0 && row->tuner != row->best &&
                  !isnan(row->t[row->tuner])
              ? " (tuner's choice slower)"
              : "");
}

static void printCrossovers(FILE *out, int n, const struct simTableSpec *s, const int *best) {
  char a[32], b[32];
  for (int i = 1; i < s->nsizes; i++)
    if (best[i] >= 0 && best[i - 1] >= 0 && best[i] != best[i - 1]) {
      humanBytes(a, sizeof a, s->sizes[i - 1]);
      humanBytes(b, sizeof b, s->sizes[i]);
      fprintf(out, "#   crossover at %d ranks: %s -> %s between %s and %s\n", n,
              simAlgoNames[best[i - 1]], simAlgoNames[best[i]], a, b);
    }
}

int simTablePrint(FILE *out, const struct simTableSpec *s, char *err, size_t errLen) {
  for (int k = 0; k < s->ncolls; k++) {
    printHeader(out, s, s->colls[k]);
    for (int i = 0; i < s->nranks; i++) {
      struct simComm *c = simCommNew(s->f, s->ranks[i], err, errLen);
      if (c == NULL) return -1;
      int best[SIM_TABLE_MAX_SIZES];
      for (int j = 0; j < s->nsizes; j++) {
        struct simCall call = {s->colls[k], s->sizes[j]};
        struct row row;
        simulateRow(s, c, &call, &row, out);
        printRow(out, s, c, &call, &row);
        best[j] = row.best;
        fflush(out);
      }
      printCrossovers(out, s->ranks[i], s, best);
      simCommFree(c);
    }
  }
  return 0;
}

int simStragglerPrint(FILE *out, const struct simTableSpec *s, const struct simOptions *straggler,
                      char *err, size_t errLen) {
  fprintf(out, "\n# One straggler on %s: ", s->f->name);
  if (straggler->slowRank >= 0)
    fprintf(out, "rank %d's links %.3g x slower", straggler->slowRank, straggler->slowFactor);
  if (straggler->lateRank >= 0)
    fprintf(out, "%srank %d late by %.3g us", straggler->slowRank >= 0 ? ", " : "",
            straggler->lateRank, straggler->lateUs);
  fprintf(out, " (exact mode); time in us\n%-14s %8s %9s %-5s %11s %11s %8s\n", "collective",
          "ranks", "bytes", "algo", "alone", "straggler", "ratio");
  for (int k = 0; k < s->ncolls; k++)
    for (int i = 0; i < s->nranks; i++) {
      struct simComm *c = simCommNew(s->f, s->ranks[i], err, errLen);
      if (c == NULL) return -1;
      for (int j = 0; j < s->nsizes; j++)
        for (int a = 0; a < SIM_ALGOS; a++) {
          if (!(s->algos & (1u << a))) continue;
          struct simCall call = {s->colls[k], s->sizes[j]};
          char why[256], size[32];
          double alone = simCell(c, (enum simAlgo)a, &call, SIM_MODE_EXACT, 0, s->calls, NULL, why, sizeof why);
          if (isnan(alone)) continue;
          double slow = simCell(c, (enum simAlgo)a, &call, SIM_MODE_EXACT, 0, s->calls, straggler, why,
                                sizeof why);
          humanBytes(size, sizeof size, call.bytes);
          fprintf(out, "%-14s %8d %9s %-5s %11.2f %11.2f %8.3f\n", weftCollName(call.coll),
                  s->ranks[i], size, simAlgoNames[a], alone, slow, slow / alone);
        }
      simCommFree(c);
    }
  return 0;
}
