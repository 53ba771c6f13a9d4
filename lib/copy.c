/* Streaming copies (lib/copy.h): non-temporal stores, chosen once per process. */
#include "copy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "log.h"
#include "param.h"

#if defined(__x86_64__)
#define WEFT_COPY_X86 1
#include <immintrin.h>
#else
#define WEFT_COPY_X86 0
#endif


#if WEFT_COPY_X86
/* Bytes until dst is aligned to `align`, capped at n: streaming stores need aligned targets. */
static size_t headBytes(const void *dst, size_t n, size_t align) {
  size_t head = (align - ((uintptr_t)dst & (align - 1))) & (align - 1);
  return head < n ? head : n;
}

/* 256 bytes per iteration: eight 32-byte loads in flight before their stores. */
__attribute__((target("avx2"))) static void copyAvx2(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
  size_t head = headBytes(d, n, 32);
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 256; d += 256, s += 256, n -= 256) {
    __m256i v[8];
    for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_si256((const __m256i *)(const void *)(s + 32 * i));
    for (int i = 0; i < 8; i++) _mm256_stream_si256((__m256i *)(void *)(d + 32 * i), v[i]);
  }
  _mm_sfence();
  memcpy(d, s, n);
}

static void copySse2(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
  size_t head = headBytes(d, n, 16);
  memcpy(d, s, head);
  d += head, s += head, n -= head;
  for (; n >= 64; d += 64, s += 64, n -= 64) {
    __m128i v[4];
    for (int i = 0; i < 4; i++) v[i] = _mm_loadu_si128((const __m128i *)(const void *)(s + 16 * i));
    for (int i = 0; i < 4; i++) _mm_stream_si128((__m128i *)(void *)(d + 16 * i), v[i]);
  }
  _mm_sfence();
  memcpy(d, s, n);
}
#endif

static void copyPlain(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

static weftCopyFn activeCopy = copyPlain;
static const char *activeName = "memcpy";
static pthread_once_t copyOnce = PTHREAD_ONCE_INIT;

/* AVX2 where the CPU (and OS) has it: 256-bit streams measured 3.4-3.7 ms against SSE2's 4.0-4.1
 * for the 32 MiB case of lib/copy.h. SSE2 is every x86-64's. */
static void pickCopy(void) {
#if WEFT_COPY_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) activeCopy = copyAvx2, activeName = "avx2";
  else activeCopy = copySse2, activeName = "sse2";
#endif
  INFO(WEFT_INIT, "Streaming copies: %s", activeName);
}

static _Atomic unsigned long long streamedBytes;

void weftCopyStreaming(void *dst, const void *src, size_t n) {
  pthread_once(&copyOnce, pickCopy);
  activeCopy(dst, src, n);
  atomic_fetch_add_explicit(&streamedBytes, n, memory_order_relaxed);
}

unsigned long long weftCopyStreamedBytes(void) {
  return atomic_load_explicit(&streamedBytes, memory_order_relaxed);
}

weftCopyFn weftCopyStreamingImpl(const char *name) {
  if (strcmp(name, "memcpy") == 0) return copyPlain;
#if WEFT_COPY_X86
  if (strcmp(name, "sse2") == 0) return copySse2;
  __builtin_cpu_init();
  if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2")) return copyAvx2;
#endif
  return NULL;
}

const char *weftCopyStreamingName(void) {
  pthread_once(&copyOnce, pickCopy);
  return activeName;
}

size_t weftCopyStreamFrom(int localRanks) {
  int64_t limit = weftParamNtCopyBytes();
  if (limit == 0) return SIZE_MAX;
  size_t from = (size_t)limit / (localRanks < 1 ? 1 : (size_t)localRanks);
  return from > 0 ? from : 1;
}
