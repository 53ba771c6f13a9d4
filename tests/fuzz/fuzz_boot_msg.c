/* Point-to-point messages (weftBootstrapExchange) as a listener receives them from a dialer
 * whose hello proved the secret, what the listener then does with them (store them: into the
 * requests of an exchange in progress, else the stash, bounded per sender), and the answer as
 * the dialer receives it. Input: options u8 (bit 0: sign the message with the right MAC, so
 * the stash behind the parser is reached; bit 1: sign the answer as "stored"; bit 2: as
 * "refused"), the sender's rank u16, nranks u16, how many times the listener gets the
 * message u8, the message (WEFT_BOOT_P2P_WIRE_BYTES), the answer (16), then the requests of
 * the exchange the stash is drained into afterwards: peer u16 | tag u32 each. The dialer's
 * nonce is fuzzNonceA, the listener's fuzzNonceB. */
#include <stdio.h>
#include <string.h>

#include "boot_internal.h"
#include "fuzz_common.h"

static void signMessage(uint8_t *wire) {
  uint32_t tag = (uint32_t)wire[4] << 24 | (uint32_t)wire[5] << 16 | (uint32_t)wire[6] << 8 | wire[7];
  weftBootMsgBuild(wire, fuzzSecret, fuzzNonceA, fuzzNonceB, tag, wire + 8);
}

/* What the listener does with a message that passed: store it `copies` times, then let an
 * exchange take what it asks for from the stash. */
static void storeAndTake(int from, int nranks, uint32_t tag, const uint8_t *msg, int copies,
                         const uint8_t *req, size_t reqLen) {
  struct weftBootstrap b = {.rank = nranks - 1, .nranks = nranks, .listenFd = -1};
  int stored = 0;
  for (int i = 0; i < copies; i++) stored += weftBootServeDeliver(&b, from, tag, msg) == 0;
  if (stored > WEFT_BOOT_STASH_PER_SENDER) abort(); /* the bound holds */
  int nin = (int)(reqLen / 6);
  struct weftBootMsg *in = calloc((size_t)nin + 1, sizeof *in);
  uint8_t *filled = calloc((size_t)nin + 1, 1);
  if (in == NULL || filled == NULL) abort();
  for (int j = 0; j < nin; j++) {
    const uint8_t *r = req + 6 * j;
    in[j].peer = (int)((uint32_t)r[0] << 8 | r[1]) % nranks;
    in[j].tag = (uint32_t)r[2] << 24 | (uint32_t)r[3] << 16 | (uint32_t)r[4] << 8 | r[5];
  }
  struct bootWants wants = {.in = in, .nin = nin, .left = nin, .filled = filled, .badFrom = -1};
  weftBootServeTakeStashed(&b, &wants);
  int taken = 0;
  for (int j = 0; j < nin; j++)
    if (filled[j]) {
      taken++;
      if (in[j].peer != from || in[j].tag != tag || memcmp(in[j].data, msg, MSG_BYTES) != 0) abort();
    }
  if (taken + (int)b.serve.nstash != stored || wants.left != nin - taken) abort();
  weftBootServeFree(&b);
  free(in);
  free(filled);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 6) return 0;
  uint8_t opts = data[0];
  int from = (int)((uint32_t)data[1] << 8 | data[2]);
  int nranks = (int)((uint32_t)data[3] << 8 | data[4]);
  int copies = data[5];
  data += 6;
  size -= 6;
  uint8_t *wire = fuzzTake(&data, &size, WEFT_BOOT_P2P_WIRE_BYTES);
  uint8_t *reply = fuzzTake(&data, &size, WEFT_BOOT_MAC_BYTES);
  if (wire == NULL || reply == NULL) {
    free(wire);
    free(reply);
    return 0;
  }
  if (opts & 1) signMessage(wire);
  uint32_t tag = 0;
  uint8_t msg[WEFT_BOOT_MSG_BYTES];
  const char *why = weftBootstrapParseMsg(fuzzSecret, fuzzNonceA, fuzzNonceB, wire, &tag, msg);
  /* A sender's rank is below nranks and not the listener's (weftBootstrapCheckHello did that). */
  if (why == NULL && nranks >= 2 && nranks <= 4096 && from < nranks - 1)
    storeAndTake(from, nranks, tag, msg, copies, data, size);
  if (why == NULL && (opts & 6)) {
    weftBootMsgReplyBuild(reply, fuzzSecret, fuzzNonceA, fuzzNonceB, tag, (opts & 2) != 0);
    if (weftBootstrapCheckMsgReply(fuzzSecret, fuzzNonceA, fuzzNonceB, tag, reply) != ((opts & 2) != 0))
      abort();
  }
  (void)weftBootstrapCheckMsgReply(fuzzSecret, fuzzNonceA, fuzzNonceB, tag, reply);
  free(wire);
  free(reply);
  return 0;
}
