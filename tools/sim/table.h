/* weft-sim's tables (table.c) and what the command asks for (tools/weft-sim.c). */
#ifndef WEFT_SIM_TABLE_H_
#define WEFT_SIM_TABLE_H_

#include <stdio.h>

#include "sim.h"

enum { SIM_MODE_AUTO, SIM_MODE_EXACT, SIM_MODE_SYMMETRIC };
#define SIM_TABLE_MAX_SIZES 64
#define SIM_TABLE_MAX_RANKS 32

struct simTableSpec {
  const struct simFabric *f;
  weftColl_t colls[3];
  int ncolls;
  int ranks[SIM_TABLE_MAX_RANKS];
  int nranks;
  size_t sizes[SIM_TABLE_MAX_SIZES];
  int nsizes;
  unsigned algos; /* bit per enum simAlgo */
  int mode;       /* SIM_MODE_*: auto is exact up to exactLimit ranks, symmetric beyond */
  int exactLimit;
  int calls;      /* struct simOptions' calls */
};

/* A simulated time in us, or NAN with the reason in why. extra: stragglers (or NULL). */
double simCell(struct simComm *c, enum simAlgo algo, const struct simCall *call, int mode,
               int exactLimit, int calls, const struct simOptions *extra, char *why, size_t len);
int simTablePrint(FILE *out, const struct simTableSpec *s, char *err, size_t errLen);
int simStragglerPrint(FILE *out, const struct simTableSpec *s, const struct simOptions *straggler,
                      char *err, size_t errLen);

#endif
