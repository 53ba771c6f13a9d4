/* A training job's view of the simulated collectives (plan.c). */
#ifndef WEFT_SIM_PLAN_H_
#define WEFT_SIM_PLAN_H_

#include <stdio.h>

#include "table.h"

struct simTrain {
  double params, tokens, tflops, mfu; /* tokens per step (global), TFLOPS per GPU (dense bf16) */
};
struct simGoodput {
  double mtbfHours;     /* one card's mean time between failures */
  double ckptIntervalS, ckptCostS, restartS; /* checkpoint/restart */
  double recoverS;      /* shrink-and-continue: weft's recovery (weftCommShrink/Recover) */
};

double simStepComputeUs(const struct simTrain *t, int gpus);
/* Fractions of the cards' time that does useful work, 0 to 1. */
double simGoodputCheckpoint(const struct simGoodput *g, int cards);
double simGoodputShrink(const struct simGoodput *g, int cards, double stepS);
/* Per rank count of s: compute, the gradient AllReduce, its share; goodputs when g is set. */
int simTrainPrint(FILE *out, const struct simTableSpec *s, const struct simTrain *t,
                  const struct simGoodput *g, char *err, size_t errLen);

#endif
