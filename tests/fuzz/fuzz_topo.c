/* Host identity: a peer's struct weftPeerInfo as all-gathered through the bootstrap (its
 * strings printed in messages), and the boot id file's text. */
#include <stdio.h>

#include "core.h"
#include "fuzz_common.h"
#include "transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct weftPeerInfo *peer = malloc(sizeof *peer);
  if (peer == NULL) abort();
  memset(peer, 0, sizeof *peer);
  memcpy(peer, data, size < sizeof *peer ? size : sizeof *peer);
  weftTopoParsePeerInfo(peer);
  char line[256];
  snprintf(line, sizeof line, "%s %s", peer->hostname, peer->hostId);
  free(peer);

  size_t textLen = size;
  uint8_t *text = fuzzTake(&data, &size, textLen);
  char boot[40];
  weftTopoParseBootId((const char *)text, textLen, boot, sizeof boot);
  if (strlen(boot) >= sizeof boot) abort();
  free(text);
  return 0;
}
