/* The root's replies as a rank receives them: the 32-byte header, the body it announces (the
 * rank table), its MAC, and the decoded table. Input: options u8 (bit 0: sign with the right
 * MAC), nranks u16, header[32], then the body (a STATUS or ABORT body lists missing ranks). */
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "fuzz_common.h"
#include "socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  uint8_t opts = data[0];
  int nranks = (int)((uint32_t)data[1] << 8 | data[2]);
  data += 3;
  size -= 3;
  if (nranks < 1) return 0;
  uint8_t *head = fuzzTake(&data, &size, WEFT_BOOT_REPLY_HEADER_BYTES);
  if (head == NULL) return 0;
  uint32_t type = 0, arg = 0;
  size_t bodyLen = 0;
  if (weftBootstrapParseReplyHeader(head, nranks, &type, &arg, &bodyLen) == 0) {
    uint8_t *body = fuzzTake(&data, &size, bodyLen);
    if (body != NULL) {
      int ok = weftBootstrapCheckReplyMac(fuzzSecret, fuzzNonceA, fuzzNonceB, 0, head, body,
                                          bodyLen) == 0;
      if (opts & 1) ok = 1; /* as if the root had signed it */
      if (ok && type == 2) {
        union weftSockAddr *peers = calloc((size_t)nranks, sizeof *peers);
        if (peers == NULL) abort();
        int bad = weftBootstrapParseTable(body, nranks, peers);
        char name[WEFT_SOCK_NAME_MAX];
        for (int r = 0; bad < 0 && r < nranks; r++) weftSockAddrName(&peers[r], name);
        free(peers);
      } else if (ok && (type == 1 || type == 3)) {
        /* What the rank computes from a progress report or an abort: the count and the list
         * of ranks still missing. */
        volatile int missing = nranks - (int)arg;
        (void)missing;
        char text[192];
        if (weftBootstrapParseMissing(body, bodyLen, nranks, text, sizeof text) == 0 &&
            strlen(text) >= sizeof text)
          abort();
      }
      free(body);
    }
  }
  free(head);
  return 0;
}
