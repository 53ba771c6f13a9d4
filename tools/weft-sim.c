/* weft-sim: predicts weft's AllReduce, AllGather and ReduceScatter at scales nobody can run
 * here, on a described fabric, from the algorithms' own schedules (tools/sim/, docs/scale.md).
 *   weft-sim FABRIC [--coll LIST] [--ranks LIST] [--sizes LIST] [--algo LIST]
 *            [--mode auto|exact|symmetric] [--exact-limit N] [--calls N]
 *            [--trace FILE] [--slow RANK:FACTOR] [--late RANK:US]
 * Every option is checked; a bad one is refused with what is allowed (exit 2). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plan.h"
#include "sim.h"
#include "table.h"

static void usage(FILE *out) {
  fprintf(out,
          "usage: weft-sim FABRIC [options]\n"
          "  FABRIC               a fabric description file (docs/scale.md; examples in\n"
          "                       tools/sim/fabrics, installed under share/weft/fabrics)\n"
          "  --coll LIST          allreduce,allgather,reducescatter (default: all three)\n"
          "  --ranks LIST         rank counts, whole hosts (default: 8,64,...,262144 that fit)\n"
          "  --sizes LIST         bytes, with B, KiB, MiB or GiB (default: 8,4KiB,64KiB,1MiB,\n"
          "                       16MiB,256MiB): AllReduce's buffer, AllGather's result,\n"
          "                       ReduceScatter's input, as nccl-tests counts them\n"
          "  --algo LIST          ring,tree,hier (default: all; the tuner's choice is always shown)\n"
          "  --mode MODE          auto (exact up to --exact-limit ranks, symmetric beyond),\n"
          "                       exact, symmetric (default auto)\n"
          "  --exact-limit N      default 512\n"
          "  --calls N            each call run N times back to back, as a benchmark's loop\n"
          "                       runs it, timing the last (default 1: one call, from idle)\n"
          "  --trace FILE         JSON lines, one per step of every simulated rank (one\n"
          "                       collective, rank count, size and algorithm only)\n"
          "  --slow RANK:FACTOR   the cost of one straggler whose links run FACTOR times slower\n"
          "  --late RANK:US       ... or that starts US microseconds late (both: both)\n"
          "  --train P,T,TFLOPS,MFU  the share of a data-parallel training step in its gradient\n"
          "                       AllReduce: P parameters, T tokens a step, TFLOPS per GPU, MFU\n"
          "  --goodput MTBF,IVL,CKPT,RESTART,RECOVER  with --train: goodput at each rank count,\n"
          "                       card MTBF in hours, checkpoint interval, checkpoint cost,\n"
          "                       restart and weft's shrink recovery in seconds\n");
}

static int refuse(const char *opt, const char *value, const char *allowed) {
  fprintf(stderr, "weft-sim: %s '%s' is not allowed: %s\n", opt, value, allowed);
  return -1;
}

static int parseSize(const char *text, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno != 0 || text[0] == '-') return -1;
  static const struct { const char *unit; unsigned long long mult; } units[] = {
    {"", 1}, {"B", 1}, {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}};
  for (size_t i = 0; i < sizeof units / sizeof *units; i++)
    if (strcmp(end, units[i].unit) == 0) {
      if (v == 0 || v > (64ull << 30) / units[i].mult) return -1;
      *out = (size_t)(v * units[i].mult);
      return 0;
    }
  return -1;
}

static int parseInt(const char *text, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static int parseList(const char *opt, const char *text, int (*one)(const char *, void *),
                     void *ctx, const char *allowed) {
  char buf[1024];
  if (strlen(text) >= sizeof buf) return refuse(opt, text, "too long");
  snprintf(buf, sizeof buf, "%s", text);
  char *save = NULL;
  int any = 0;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), any = 1)
    if (one(tok, ctx) != 0) return refuse(opt, tok, allowed);
  return any ? 0 : refuse(opt, text, allowed);
}

static int oneColl(const char *tok, void *ctx) {
  struct simTableSpec *s = ctx;
  static const struct { const char *name; weftColl_t coll; } colls[] = {
    {"allreduce", weftCollAllReduce}, {"allgather", weftCollAllGather},
    {"reducescatter", weftCollReduceScatter}};
  for (int i = 0; i < 3; i++)
    if (strcasecmp(tok, colls[i].name) == 0 && s->ncolls < 3) {
      s->colls[s->ncolls++] = colls[i].coll;
      return 0;
    }
  return -1;
}

static int oneRanks(const char *tok, void *ctx) {
  struct simTableSpec *s = ctx;
  long v;
  if (s->nranks == SIM_TABLE_MAX_RANKS || parseInt(tok, 2, 1 << 20, &v) != 0) return -1;
  s->ranks[s->nranks++] = (int)v;
  return 0;
}

static int oneSize(const char *tok, void *ctx) {
  struct simTableSpec *s = ctx;
  if (s->nsizes == SIM_TABLE_MAX_SIZES) return -1;
  return parseSize(tok, &s->sizes[s->nsizes++]);
}

static int oneAlgo(const char *tok, void *ctx) {
  struct simTableSpec *s = ctx;
  for (int a = 0; a < SIM_ALGOS; a++)
    if (strcmp(tok, simAlgoNames[a]) == 0) {
      s->algos |= 1u << a;
      return 0;
    }
  return -1;
}

static int parseRankPair(const char *opt, const char *text, int *rank, double *value) {
  const char *colon = strchr(text, ':');
  char *end;
  long r;
  char head[32];
  if (colon == NULL || (size_t)(colon - text) >= sizeof head)
    return refuse(opt, text, "RANK:VALUE, e.g. 3:2");
  snprintf(head, sizeof head, "%.*s", (int)(colon - text), text);
  errno = 0;
  double v = strtod(colon + 1, &end);
  if (parseInt(head, 0, (1 << 20) - 1, &r) != 0 || end == colon + 1 || *end != '\0' ||
      errno != 0 || !(v > 0) || v > 1e9)
    return refuse(opt, text, "RANK:VALUE with a rank and a positive value, e.g. 3:2");
  *rank = (int)r;
  *value = v;
  return 0;
}

/* n positive numbers separated by commas, each within (0, hi[i]]. */
static int parseNumbers(const char *opt, const char *text, int n, const double *hi, double *out,
                        const char *allowed) {
  const char *p = text;
  for (int i = 0; i < n; i++) {
    char *end;
    errno = 0;
    out[i] = strtod(p, &end);
    if (end == p || errno != 0 || !(out[i] > 0) || out[i] > hi[i] || *end != (i + 1 < n ? ',' : '\0'))
      return refuse(opt, text, allowed);
    p = end + 1;
  }
  return 0;
}

struct command {
  const char *fabric, *trace;
  int train, goodput;
  struct simTrain t;
  struct simGoodput g;
  struct simTableSpec spec;
  struct simOptions straggler;
};

static int parseArgs(int argc, char **argv, struct command *cmd) {
  struct simTableSpec *s = &cmd->spec;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    }
    if (a[0] != '-') {
      if (cmd->fabric != NULL) return refuse("argument", a, "one fabric file only");
      cmd->fabric = a;
      continue;
    }
    if (v == NULL) return refuse(a, "", "it needs a value (weft-sim --help)");
    i++;
    long n;
    int rc = 0;
    if (strcmp(a, "--coll") == 0) rc = parseList(a, v, oneColl, s, "allreduce, allgather, reducescatter");
    else if (strcmp(a, "--ranks") == 0) rc = parseList(a, v, oneRanks, s, "rank counts from 2 to 1048576");
    else if (strcmp(a, "--sizes") == 0)
      rc = parseList(a, v, oneSize, s, "sizes from 1 B to 64 GiB, e.g. 8,64KiB,16MiB (64 at most)");
    else if (strcmp(a, "--algo") == 0) rc = parseList(a, v, oneAlgo, s, "ring, tree, hier");
    else if (strcmp(a, "--mode") == 0) {
      if (strcmp(v, "auto") == 0) s->mode = SIM_MODE_AUTO;
      else if (strcmp(v, "exact") == 0) s->mode = SIM_MODE_EXACT;
      else if (strcmp(v, "symmetric") == 0) s->mode = SIM_MODE_SYMMETRIC;
      else rc = refuse(a, v, "auto, exact or symmetric");
    } else if (strcmp(a, "--exact-limit") == 0) {
      if (parseInt(v, 2, 1 << 20, &n) != 0) rc = refuse(a, v, "2 to 1048576");
      s->exactLimit = (int)n;
    } else if (strcmp(a, "--calls") == 0) {
      if (parseInt(v, 1, 100, &n) != 0) rc = refuse(a, v, "1 to 100");
      s->calls = (int)n;
    } else if (strcmp(a, "--trace") == 0) cmd->trace = v;
    else if (strcmp(a, "--slow") == 0) {
      rc = parseRankPair(a, v, &cmd->straggler.slowRank, &cmd->straggler.slowFactor);
    } else if (strcmp(a, "--late") == 0) {
      rc = parseRankPair(a, v, &cmd->straggler.lateRank, &cmd->straggler.lateUs);
    } else if (strcmp(a, "--train") == 0) {
      static const double hi[4] = {1e15, 1e12, 1e6, 1};
      double x[4];
      rc = parseNumbers(a, v, 4, hi, x, "P,T,TFLOPS,MFU, e.g. 70e9,4e6,989,0.4 (MFU at most 1)");
      if (rc == 0) cmd->t = (struct simTrain){x[0], x[1], x[2], x[3]}, cmd->train = 1;
    } else if (strcmp(a, "--goodput") == 0) {
      static const double hi[5] = {1e9, 1e9, 1e9, 1e9, 1e9};
      double x[5];
      rc = parseNumbers(a, v, 5, hi, x, "MTBF_HOURS,INTERVAL_S,CKPT_S,RESTART_S,RECOVER_S, e.g. "
                        "10000,1800,30,600,5");
      if (rc == 0) cmd->g = (struct simGoodput){x[0], x[1], x[2], x[3], x[4]}, cmd->goodput = 1;
    } else rc = refuse("option", a, "see weft-sim --help");
    if (rc != 0) return -1;
  }
  if (cmd->goodput && !cmd->train) return refuse("--goodput", "", "it needs --train (the step time)");
  if (cmd->fabric == NULL) {
    usage(stderr);
    return -1;
  }
  return 0;
}

static void defaults(struct simTableSpec *s) {
  if (s->ncolls == 0) {
    s->colls[0] = weftCollAllReduce, s->colls[1] = weftCollAllGather;
    s->colls[2] = weftCollReduceScatter, s->ncolls = 3;
  }
  if (s->algos == 0) s->algos = (1u << SIM_ALGOS) - 1;
  if (s->exactLimit == 0) s->exactLimit = 512;
  if (s->nsizes == 0) {
    static const size_t sizes[] = {8, 4096, 65536, 1u << 20, 16u << 20, 256u << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) s->sizes[s->nsizes++] = sizes[i];
  }
  if (s->nranks == 0) {
    int most = s->f->hosts * s->f->gpus;
    for (long n = 8; n <= most; n *= 8)
      if (n <= s->f->gpus || n % s->f->gpus == 0) s->ranks[s->nranks++] = (int)n;
  }
}

/* Sizes a collective cannot split into equal float parts per rank are refused up front. */
static int checkSizes(const struct simTableSpec *s) {
  for (int k = 0; k < s->ncolls; k++)
    for (int j = 0; j < s->nsizes; j++)
      if (s->sizes[j] % sizeof(float) != 0) {
        fprintf(stderr, "weft-sim: --sizes %zu: not a whole number of float32 elements\n",
                s->sizes[j]);
        return -1;
      }
  return 0;
}

static int writeTrace(struct command *cmd, char *err, size_t len) {
  struct simTableSpec *s = &cmd->spec;
  if (s->ncolls != 1 || s->nranks != 1 || s->nsizes != 1 || __builtin_popcount(s->algos) != 1) {
    fprintf(stderr, "weft-sim: --trace needs exactly one --coll, --ranks, --sizes and --algo\n");
    return -1;
  }
  FILE *out = fopen(cmd->trace, "w");
  if (out == NULL) {
    snprintf(err, len, "%s: cannot write: %s", cmd->trace, strerror(errno));
    return -1;
  }
  struct simComm *c = simCommNew(s->f, s->ranks[0], err, len);
  int rc = -1;
  if (c != NULL) {
    struct simCall call = {s->colls[0], s->sizes[0]};
    struct simOptions o = cmd->straggler;
    o.trace = out;
    o.calls = s->calls;
    o.symmetric = s->mode == SIM_MODE_SYMMETRIC;
    struct simResult r;
    enum simAlgo algo = (enum simAlgo)__builtin_ctz(s->algos);
    rc = simRun(c, algo, &call, &o, &r, err, len);
    if (rc == 0)
      printf("%s %s of %zu bytes on %d ranks: %.2f us; %zu ranks simulated, %zu steps, %zu "
             "pieces, trace in %s\n", simAlgoNames[algo], weftCollName(call.coll), call.bytes,
             s->ranks[0], r.timeUs, r.ranksSimulated, r.steps, r.pieces, cmd->trace);
  }
  simCommFree(c);
  if (fclose(out) != 0 && rc == 0) {
    snprintf(err, len, "%s: %s", cmd->trace, strerror(errno));
    rc = -1;
  }
  return rc;
}

int main(int argc, char **argv) {
  struct command cmd = {0};
  cmd.straggler = (struct simOptions){0, -1, 1, -1, 0, NULL, 1};
  if (parseArgs(argc, argv, &cmd) != 0) return 2;
  struct simFabric f;
  char err[512];
  if (simFabricLoad(cmd.fabric, &f, err, sizeof err) != 0) {
    fprintf(stderr, "weft-sim: %s\n", err);
    return 2;
  }
  cmd.spec.f = &f;
  defaults(&cmd.spec);
  if (checkSizes(&cmd.spec) != 0) return 2;
  int rc;
  if (cmd.trace != NULL) rc = writeTrace(&cmd, err, sizeof err);
  else if (cmd.train)
    rc = simTrainPrint(stdout, &cmd.spec, &cmd.t, cmd.goodput ? &cmd.g : NULL, err, sizeof err);
  else if (cmd.straggler.slowRank >= 0 || cmd.straggler.lateRank >= 0)
    rc = simStragglerPrint(stdout, &cmd.spec, &cmd.straggler, err, sizeof err);
  else rc = simTablePrint(stdout, &cmd.spec, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "weft-sim: %s\n", err);
    return 1;
  }
  return 0;
}
