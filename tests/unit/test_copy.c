/* Unit tests of lib/copy.c: every streaming copy this CPU has against memcpy, for lengths and
 * alignments that exercise the head (to the stores' alignment), the unrolled body and the
 * tail, with guard bytes around the destination; the pick per CPU; and WEFT_NT_COPY_BYTES's
 * threshold. Criterion runs each test in its own process, so a test may set the parameter. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "copy.h"

TestSuite(copy, .timeout = 120);

#define GUARD 64
static const size_t lengths[] = {0, 1, 15, 16, 17, 31, 32, 63, 64, 65, 255, 256, 257, 1000,
                                 4099, 131040, 1048589};

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed * 7u + (i >> 8));
}

/* One copy of n bytes from src + so to dst + dso: the bytes right, nothing outside touched. */
static void checkOne(weftCopyFn copy, const char *name, size_t n, size_t so, size_t dso) {
  unsigned char *src = malloc(n + 2 * GUARD), *dst = malloc(n + 2 * GUARD);
  cr_assert(src != NULL && dst != NULL);
  fill(src, n + 2 * GUARD, 1);
  memset(dst, 0xa5, n + 2 * GUARD);
  copy(dst + GUARD + dso, src + so, n);
  for (size_t i = 0; i < GUARD + dso; i++)
    cr_assert_eq(dst[i], 0xa5, "%s: n %zu src+%zu dst+%zu: byte %zd before dst written", name, n,
                 so, dso, (ssize_t)i - (ssize_t)(GUARD + dso));
  cr_assert(memcmp(dst + GUARD + dso, src + so, n) == 0, "%s: n %zu src+%zu dst+%zu: wrong bytes",
            name, n, so, dso);
  for (size_t i = GUARD + dso + n; i < n + 2 * GUARD; i++)
    cr_assert_eq(dst[i], 0xa5, "%s: n %zu src+%zu dst+%zu: byte %zu past the end written", name,
                 n, so, dso, i - (GUARD + dso + n));
  free(src);
  free(dst);
}

static void checkImpl(const char *name) {
  weftCopyFn copy = weftCopyStreamingImpl(name);
  if (copy == NULL) {
    cr_log_warn("skipped: this CPU has no %s streaming copy", name);
    return;
  }
  for (size_t l = 0; l < sizeof lengths / sizeof lengths[0]; l++)
    for (size_t so = 0; so < 64; so += 9)
      for (size_t dso = 0; dso < GUARD; dso += lengths[l] > 4099 ? 16 : 1)
        checkOne(copy, name, lengths[l], so, dso);
}

Test(copy, avx2_equals_memcpy) { checkImpl("avx2"); }
Test(copy, sse2_equals_memcpy) { checkImpl("sse2"); }
Test(copy, memcpy_fallback) { checkImpl("memcpy"); }

/* The widest the CPU has: AVX2 where present on x86-64, SSE2 on every other x86-64. */
Test(copy, picks_the_widest) {
  const char *want = weftCopyStreamingImpl("avx2") != NULL   ? "avx2"
                     : weftCopyStreamingImpl("sse2") != NULL ? "sse2"
                                                             : "memcpy";
  cr_expect_str_eq(weftCopyStreamingName(), want);
  unsigned char a[300], b[300];
  fill(a, sizeof a, 3);
  unsigned long long before = weftCopyStreamedBytes();
  weftCopyOut(b, a, sizeof a, 1);
  cr_expect(memcmp(a, b, sizeof a) == 0);
  cr_expect_eq(weftCopyStreamedBytes() - before, sizeof a, "the streamed count");
  weftCopyOut(b, a, sizeof a, 0); /* memcpy: not counted */
  cr_expect_eq(weftCopyStreamedBytes() - before, sizeof a);
}

/* Default 16 MiB over the host's ranks: 2 ranks stream from 8 MiB each, 1 from 16 MiB. */
Test(copy, threshold_default) {
  unsetenv("WEFT_NT_COPY_BYTES");
  cr_expect_eq(weftCopyStreamFrom(1), 16u << 20);
  cr_expect_eq(weftCopyStreamFrom(2), 8u << 20);
  cr_expect_eq(weftCopyStreamFrom(8), 2u << 20);
  cr_expect_eq(weftCopyStreamFrom(0), 16u << 20, "a rank count under 1 counts as 1");
}

Test(copy, threshold_zero_never) {
  setenv("WEFT_NT_COPY_BYTES", "0", 1);
  cr_expect_eq(weftCopyStreamFrom(64), SIZE_MAX);
}

Test(copy, threshold_set) {
  setenv("WEFT_NT_COPY_BYTES", "1M", 1);
  cr_expect_eq(weftCopyStreamFrom(2), 512u << 10);
  setenv("WEFT_NT_COPY_BYTES", "1", 1);
  cr_expect_eq(weftCopyStreamFrom(3), 1, "never 0: a call with nothing to write streams nothing");
}
