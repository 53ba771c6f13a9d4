/* What every MPI baseline (mpi_<name>_perf) shares: MPI's names of the datatypes and ops, the
 * options MPI cannot honour, the library line, each process's rank, and errors of a call as
 * one message. One rank per MPI process (-t 1). */
#ifndef WEFT_BENCH_PERF_MPI_H_
#define WEFT_BENCH_PERF_MPI_H_

#include "perf_run.h"

/* MPI's type of perfTypes[type]. MPI has no half or bfloat16: a collective that only moves
 * data moves them as 16-bit integers (reduces 0); one that reduces cannot (MPI_DATATYPE_NULL). */
MPI_Datatype perfMpiType(int type, int reduces);
MPI_Op perfMpiOp(int op); /* MPI_OP_NULL for avg, which MPI lacks */
/* perfBench.supported of a collective that reduces: "all" skips what MPI lacks. */
int perfMpiSupportedReduce(int type, int op);
/* perfBench.checkOpts: only what the options ask explicitly is an error. */
const char *perfMpiCheckOptsReduce(const perfOpts *o);
const char *perfMpiCheckOptsMove(const perfOpts *o);
#define PERF_MPI_NOTE_REDUCE "MPI has no half/bfloat16 type nor avg op: -d all / -o all skip them"

const char *perfMpiLibrary(void);
/* perfBench.setup: the ctx of every call, a perfWorld (this process's rank and the size). */
void *perfMpiSetup(const perfWorld *w);

/* count as MPI's int, or perfFatal. */
int perfMpiCount(size_t count, const char *call);
/* perfFatal unless rc is MPI_SUCCESS: "MPI_Bcast(count 5, float, root 1): <MPI's message>";
 * op < 0 or root < 0: not part of the call. */
void perfMpiCheck(int rc, const char *call, size_t count, int type, int op, int root);

/* perfBench fields of every MPI baseline. */
#define PERF_MPI_RANKS .hostOnly = 1, .alwaysMpi = 1, .library = perfMpiLibrary, .setup = perfMpiSetup

#endif
