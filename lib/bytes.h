/* Big-endian integers in byte buffers: every wire format of weft (bootstrap messages, tcp
 * headers and records, signature notes) is big-endian, whatever the hosts' byte order. */
#ifndef WEFT_BYTES_H_
#define WEFT_BYTES_H_

#include <stdint.h>

static inline void weftPutBe32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static inline uint32_t weftGetBe32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void weftPutBe64(uint8_t *p, uint64_t v) {
  weftPutBe32(p, (uint32_t)(v >> 32));
  weftPutBe32(p + 4, (uint32_t)v);
}
static inline uint64_t weftGetBe64(const uint8_t *p) {
  return (uint64_t)weftGetBe32(p) << 32 | weftGetBe32(p + 4);
}

#endif
