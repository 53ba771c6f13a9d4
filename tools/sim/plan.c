/* What the collectives' times mean for a training job (docs/scale.md "Training step and
 * goodput"): the share of a data-parallel step spent in the gradient AllReduce, and the
 * expected goodput per day at N cards with a card MTBF, under checkpoint/restart against
 * shrink-and-continue. */
#include <math.h>
#include <stdio.h>

#include "plan.h"

/* Compute time of one step: 6 x params x tokens / (GPUs x FLOPS x MFU), the seeds' formula. */
double simStepComputeUs(const struct simTrain *t, int gpus) {
  return 6.0 * t->params * t->tokens / ((double)gpus * t->tflops * 1e12 * t->mfu) * 1e6;
}

/* Checkpoint/restart, first order (Young/Daly): every interval loses the checkpoint's cost;
 * every failure loses half an interval of work on average plus the restart. */
double simGoodputCheckpoint(const struct simGoodput *g, int cards) {
  double failuresPerS = cards / (g->mtbfHours * 3600.0);
  double waste = g->ckptCostS / g->ckptIntervalS + failuresPerS * (g->ckptIntervalS / 2 + g->restartS);
  return waste >= 1 ? 0 : 1 - waste;
}

/* Shrink-and-continue: every failure costs the survivors the recovery and the step in flight,
 * redone; the job then runs one card short until the day's replacements grow it back (on
 * average half the day's failures are missing). */
double simGoodputShrink(const struct simGoodput *g, int cards, double stepS) {
  double failuresPerS = cards / (g->mtbfHours * 3600.0), perDay = failuresPerS * 86400.0;
  double waste = failuresPerS * (g->recoverS + stepS);
  double missing = perDay / 2 / cards;
  if (waste >= 1 || missing >= 1) return 0;
  return (1 - waste) * (1 - missing);
}

int simTrainPrint(FILE *out, const struct simTableSpec *s, const struct simTrain *t,
                  const struct simGoodput *g, char *err, size_t errLen) {
  fprintf(out, "\n# Training step on %s: %.3g parameters, %.3g tokens a step, %.4g TFLOPS x MFU %.2f;"
          "\n# the gradient AllReduce (%.3g bytes, bf16) by the tuner's choice, not overlapped\n",
          s->f->name, t->params, t->tokens, t->tflops, t->mfu, 2 * t->params);
  fprintf(out, "%8s %12s %-6s %12s %7s", "ranks", "compute ms", "algo", "allreduce ms", "share");
  if (g != NULL) fprintf(out, " %10s %10s  (goodput, MTBF %.0f h a card)", "ckpt", "shrink", g->mtbfHours);
  fprintf(out, "\n");
  for (int i = 0; i < s->nranks; i++) {
    struct simComm *c = simCommNew(s->f, s->ranks[i], err, errLen);
    if (c == NULL) return -1;
    /* bf16 gradients, as float32 elements of the same bytes, a multiple of the ranks */
    size_t unit = 4 * (size_t)s->ranks[i];
    struct simCall call = {weftCollAllReduce, (size_t)(2 * t->params) / unit * unit};
    int algo = simTunerChoice(c, &call);
    char why[512] = "no algorithm";
    double comm = algo < 0 ? NAN : simCell(c, (enum simAlgo)algo, &call, s->mode, s->exactLimit,
                                           s->calls, NULL, why, sizeof why);
    double compute = simStepComputeUs(t, s->ranks[i]);
    fprintf(out, "%8d %12.2f %-6s", s->ranks[i], compute / 1e3, algo < 0 ? "-" : simAlgoNames[algo]);
    if (isnan(comm)) fprintf(out, " %12s %7s", "-", "-");
    else fprintf(out, " %12.2f %6.1f%%", comm / 1e3, 100 * comm / (comm + compute));
    if (g != NULL) {
      double stepS = ((isnan(comm) ? 0 : comm) + compute) / 1e6;
      fprintf(out, " %9.1f%% %9.1f%%", 100 * simGoodputCheckpoint(g, s->ranks[i]),
              100 * simGoodputShrink(g, s->ranks[i], stepS));
    }
    fprintf(out, "\n");
    if (isnan(comm)) fprintf(out, "#   %s\n", why);
    simCommFree(c);
  }
  return 0;
}
