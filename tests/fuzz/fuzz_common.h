/* Shared bits of the libFuzzer targets (make fuzz): a fixed secret and nonces, big-endian
 * helpers, and input slicing. Each target is one file that includes this header. */
#ifndef WEFT_FUZZ_COMMON_H_
#define WEFT_FUZZ_COMMON_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const uint8_t fuzzSecret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t fuzzNonceA[16] = {0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
                                       0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf};
static const uint8_t fuzzNonceB[16] = {0xb0, 0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7,
                                       0xb8, 0xb9, 0xba, 0xbb, 0xbc, 0xbd, 0xbe, 0xbf};

static inline void fuzzPutBe32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static inline void fuzzPutBe64(uint8_t *p, uint64_t v) {
  fuzzPutBe32(p, (uint32_t)(v >> 32));
  fuzzPutBe32(p + 4, (uint32_t)v);
}

/* A NUL-terminated heap copy of len bytes (so ASan sees reads past the text). */
static inline char *fuzzString(const uint8_t *data, size_t len) {
  char *s = malloc(len + 1);
  if (s == NULL) abort();
  memcpy(s, data, len);
  s[len] = '\0';
  return s;
}

/* Takes exactly len bytes from the input into an exact-size heap buffer, or NULL when short. */
static inline uint8_t *fuzzTake(const uint8_t **data, size_t *size, size_t len) {
  if (*size < len) return NULL;
  uint8_t *p = malloc(len ? len : 1);
  if (p == NULL) abort();
  memcpy(p, *data, len);
  *data += len;
  *size -= len;
  return p;
}

#endif
