/* Copies into user buffers that bypass the cache once a collective's results outgrow it.
 *
 * A rank that receives through a FIFO copies every byte out of a cache-hot slot into its own
 * buffer. Ordinary stores first read each destination line from memory (write-allocate) and
 * then evict what the next copy reads; once the buffers a collective writes, on all the ranks of
 * a host, are larger than the last-level cache, both are wasted memory traffic. Non-temporal
 * (streaming) stores skip them: on this machine's EPYC (32 MiB L3), 2 ranks each receiving 32
 * MiB through 512 KiB staging copies took 3.4-3.7 ms streamed against 5.1-5.4 ms with memcpy,
 * and the two cross where 2 ranks write 8 MiB each (4 ranks: 4 MiB, 1 rank: 8-16 MiB), which is
 * WEFT_NT_COPY_BYTES's default of 16 MiB over a host's ranks. Below it, memcpy wins: the data
 * stays in the cache for whoever reads it next. */
#ifndef WEFT_COPY_H_
#define WEFT_COPY_H_

#include <stddef.h>
#include <string.h>

/* dst = src with non-temporal stores where this CPU has them (x86-64: AVX2, else SSE2), then a
 * store fence, so what follows (a flag another rank reads) is ordered after the data; elsewhere
 * memcpy. The buffers must not overlap. */
void weftCopyStreaming(void *dst, const void *src, size_t n);

/* The bytes of results per rank from which a call's copies stream, on a host of localRanks ranks:
 * WEFT_NT_COPY_BYTES over them, at least 1; SIZE_MAX (never) where it is 0. Read once per
 * communicator (lib/comm.c, comm->streamFromBytes), so no call reads the environment. */
size_t weftCopyStreamFrom(int localRanks);

static inline void weftCopyOut(void *dst, const void *src, size_t n, int streaming) {
  if (n == 0) return;
  if (streaming) weftCopyStreaming(dst, src, n);
  else memcpy(dst, src, n);
}

/* The name of the streaming copy this process uses ("avx2", "sse2" or "memcpy"). */
const char *weftCopyStreamingName(void);

/* For tests: the streaming copy called `name`, or NULL where this CPU lacks it; and the bytes
 * weftCopyStreaming has copied in this process (a relaxed count). */
typedef void (*weftCopyFn)(void *dst, const void *src, size_t n);
weftCopyFn weftCopyStreamingImpl(const char *name);
unsigned long long weftCopyStreamedBytes(void);

#endif
