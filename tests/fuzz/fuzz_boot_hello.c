/* Bootstrap hellos (registration with the root and the ring handshake) as a listener
 * receives them from anyone who connects. The first input byte selects options: bit 0 makes
 * the harness sign the hello with the right MAC (so the decoder and the checks behind it are
 * reached), bits 1-2 pick the listener's expectations (the root before and after the first
 * registration, a ring listener). The next 4 bytes are the listener's nranks. */
#include <stdio.h>

#include "bootstrap.h"
#include "fuzz_common.h"
#include "socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  uint8_t opts = data[0];
  int nranks = (int)((uint32_t)data[1] << 24 | (uint32_t)data[2] << 16 | data[3] << 8 | data[4]);
  data += 5;
  size -= 5;
  uint8_t *hello = fuzzTake(&data, &size, WEFT_BOOT_HELLO_BYTES);
  if (hello == NULL) return 0;
  if (opts & 1) { /* hello = "WFTH" | mac[16] | payload, mac = MAC('H' | nonce | payload) */
    enum { PAYLOAD = 4 + WEFT_BOOT_MAC_BYTES };
    uint8_t msg[1 + 16 + WEFT_BOOT_HELLO_BYTES - PAYLOAD];
    msg[0] = 'H';
    memcpy(msg + 1, fuzzNonceA, 16);
    memcpy(msg + 17, hello + PAYLOAD, WEFT_BOOT_HELLO_BYTES - PAYLOAD);
    fuzzPutBe32(hello, 0x57465448u);
    weftBootstrapMac(fuzzSecret, msg, sizeof msg, hello + 4);
  }
  struct weftBootstrapHello h;
  char why[160];
  if (weftBootstrapParseHello(fuzzSecret, fuzzNonceA, hello, &h) == NULL) {
    union weftSockAddr addr;
    char name[WEFT_SOCK_NAME_MAX];
    if (weftBootstrapParseAddr(h.addr, &addr) >= 0) weftSockAddrName(&addr, name);
    switch ((opts >> 1) & 3) {
      case 0: /* the root before any registration: the hello fixes nranks */
        if (weftBootstrapCheckHello(&h, WEFT_BOOT_HELLO_REGISTER, 0, -1, why, sizeof why) == 0) {
          /* What the root does next: size its tables by nranks and index them by rank. */
          uint8_t *table = calloc(h.nranks, WEFT_BOOT_ADDR_BYTES);
          if (table == NULL) abort();
          memcpy(table + (size_t)h.rank * WEFT_BOOT_ADDR_BYTES, h.addr, WEFT_BOOT_ADDR_BYTES);
          free(table);
        }
        break;
      case 1: /* the root of an nranks communicator */
      case 2: /* rank 0's ring listener, expecting rank nranks-1 */
        if (nranks < 1 || nranks > 4096) break;
        if (weftBootstrapCheckHello(&h, ((opts >> 1) & 3) == 1 ? WEFT_BOOT_HELLO_REGISTER
                                                               : WEFT_BOOT_HELLO_RING,
                                    nranks, ((opts >> 1) & 3) == 1 ? -1 : nranks - 1, why,
                                    sizeof why) == 0) {
          union weftSockAddr *peers = calloc((size_t)nranks, sizeof *peers);
          if (peers == NULL) abort();
          peers[h.rank] = addr;
          free(peers);
        }
        break;
      default: /* a listener of another kind refuses it */
        (void)weftBootstrapCheckHello(&h, 0, nranks, -1, why, sizeof why);
        break;
    }
  }
  free(hello);
  return 0;
}
