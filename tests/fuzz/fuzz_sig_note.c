/* Signature notes (lib/sigwatch.c): 40 bytes a ring neighbour sends during a lasting wait. */
#include <stdio.h>

#include "bootstrap.h"
#include "core.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *bytes = fuzzTake(&data, &size, WEFT_BOOT_NOTE_BYTES);
  if (bytes == NULL) return 0;
  struct weftSigNote n;
  if (weftSigNoteDecode(bytes, &n) == 0) {
    char a[128], b[128];
    weftSigDescribe(n.sigA, a, sizeof a);
    weftSigDescribe(n.sigB, b, sizeof b);
    if (strncmp(a, "AllReduce(count ", 16) != 0 || strncmp(b, "AllReduce(count ", 16) != 0) abort();
  }
  free(bytes);
  return 0;
}
