/* What the benchmarks move and check: datatypes and reductions in nccl-tests' order, and
 * verifiable data with its expected reduction (perf_shape.h says where each collective's
 * result comes from). */
#ifndef WEFT_BENCH_PERF_DATA_H_
#define WEFT_BENCH_PERF_DATA_H_

#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------------------------------------
 * Types and operations, in nccl-tests' order (which is also weftDataType_t's / weftRedOp_t's). */

enum { PERF_SINT, PERF_UINT, PERF_FLOAT };
enum {
  PERF_INT8, PERF_UINT8, PERF_INT32, PERF_UINT32, PERF_INT64, PERF_UINT64,
  PERF_HALF, PERF_FLOAT32, PERF_DOUBLE, PERF_BF16, PERF_NTYPES
};
enum { PERF_SUM, PERF_PROD, PERF_MAX, PERF_MIN, PERF_AVG, PERF_NOPS };
#define PERF_ALL (-1)

typedef struct {
  const char *name;
  size_t size;
  int kind;
  /* Partial results of the check data stay below this magnitude, so that they are exact
   * (fp mantissa) and do not wrap (8-bit integers, which matters for avg). */
  double exactLimit;
  /* Relative tolerance of avg: its final division may be a multiplication by 1/nranks, off
   * by an ulp in float / double; fp16 / bf16 results are rounded from fp32 and come out exact. */
  double avgTolerance;
} perfTypeInfo;

extern const perfTypeInfo perfTypes[PERF_NTYPES];
extern const char *const perfOpNames[PERF_NOPS];

/* ---------------------------------------------------------------------------------------------
 * Verifiable data. Element i of rank r's input is a small integer drawn from a hash of
 * (r, i mod PERF_PERIOD, type, op), chosen so that every partial result of any reduction order
 * is exact; the expected reduction is then computed here, per element, over all ranks. The
 * data repeats with a prime period, so a chunk moved by any power-of-two offset shows, and
 * filling and checking are memcpy/memcmp of one period at a time. A buffer holds a table from
 * some index on: element k of it is table[(first + k) % PERIOD], so the part of a collective's
 * result that comes from index first of some rank's input (a block of AllGather, AlltoAll,
 * Scatter) is checked against exactly that. */

#define PERF_PERIOD 4093
#define PERF_GUARD 64        /* bytes past the end of the result that must stay untouched */
#define PERF_SENTINEL 0xA5   /* byte pattern of out-of-place results before the call */
#define PERF_ALIGN 64

typedef struct {
  int type, op, rank, nRanks;
  size_t esize;
  char *input;  /* PERF_PERIOD elements: this rank's send data */
  char *expect; /* PERF_PERIOD elements: the reduction over all ranks (NULL: not asked for) */
  char *other;  /* PERF_PERIOD elements: otherRank's input, made when asked for */
  int otherRank;
} perfData;

/* reduction: also compute the expected reduction (nRanks x PERF_PERIOD hashes). */
void perfDataInit(perfData *d, int type, int op, int rank, int nRanks, int reduction);
void perfDataFree(perfData *d);
/* PERF_PERIOD elements of rank's input (this rank's, or one made and kept until the next). */
const char *perfDataInputOf(perfData *d, int rank);
/* buf[k] = table[(first + k) % PERF_PERIOD], k < count. */
void perfFill(char *buf, const char *table, size_t first, size_t count, size_t esize);
/* Elements of buf that differ from the table from index first on; exact = bit for bit,
 * otherwise floats compare by value (+0 == -0, avg within its tolerance). */
long long perfCountWrong(const perfData *d, const char *buf, const char *table, size_t first,
                         size_t count, int exact);
/* Elements of buf[0..count) with a byte that is not PERF_SENTINEL. */
long long perfCountNotSentinel(const char *buf, size_t count, size_t esize);

#endif
