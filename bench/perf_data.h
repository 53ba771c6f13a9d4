/* What the benchmarks move and check: datatypes and reductions in nccl-tests' order, verifiable
 * data with its expected results, and the shape of each collective (how many elements each rank
 * sends and receives for a count, and its busbw factor). */
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
 * is exact; the expected result is then computed here, per element, over all ranks. The data
 * repeats with a prime period, so a chunk moved by any power-of-two offset shows, and filling
 * and checking are memcpy/memcmp of one period at a time. */

#define PERF_PERIOD 4093
#define PERF_GUARD 64        /* bytes past the end of the result that must stay untouched */
#define PERF_SENTINEL 0xA5   /* byte pattern of out-of-place results before the call */
#define PERF_ALIGN 64

typedef struct {
  int type, op, nRanks;
  size_t esize;
  char *input;  /* PERF_PERIOD elements: this rank's send data */
  char *expect; /* PERF_PERIOD elements: the reduction over all ranks */
} perfData;

void perfDataInit(perfData *d, int type, int op, int rank, int nRanks);
void perfDataFree(perfData *d);
/* buf[i] = table[i % PERF_PERIOD], i < count. */
void perfFill(char *buf, const char *table, size_t count, size_t esize);
/* Elements of buf that differ from the periodic table; exact = bit for bit, otherwise floats
 * compare by value (+0 == -0, avg within its tolerance). */
long long perfCountWrong(const perfData *d, const char *buf, const char *table, size_t count, int exact);
/* Elements of the guard zone after the result that were written to. */
long long perfGuardWrong(const char *guard, size_t esize);

/* ---------------------------------------------------------------------------------------------
 * The shape of a collective, as nccl-tests' getCollByteCount and getBw: for count (the size
 * swept divided by the element size), the elements each rank sends and receives and the count
 * passed to the call; the in-place buffers as offsets (times the rank) into the receive buffer;
 * busbw = algbw * busFactor, algbw = the size column (the larger of the send and receive
 * bytes) per second. The check data above is a reduction over all ranks' inputs, which is the
 * expected result of AllReduce; a collective with another result adds its expected data here. */

typedef struct {
  size_t sendCount, recvCount, paramCount;     /* elements */
  size_t sendInplaceOffset, recvInplaceOffset; /* elements, times the rank */
} perfCounts;

typedef struct {
  const char *name; /* "AllReduce" */
  void (*counts)(size_t count, int nRanks, perfCounts *c);
  double (*busFactor)(int nRanks);
} perfShape;

extern const perfShape perfShapeAllReduce;

#endif
