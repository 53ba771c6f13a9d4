/* Signature notes (lib/sigwatch.c): 48 bytes a ring neighbour sends during a lasting wait. */
#include <stdio.h>

#include "bootstrap.h"
#include "core.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *bytes = fuzzTake(&data, &size, WEFT_SIG_NOTE_BYTES);
  if (bytes == NULL) return 0;
  struct weftSigNote n;
  if (weftSigNoteDecode(bytes, &n) == 0) {
    char a[128], b[128];
    weftSigDescribe(n.sigA, n.whatA, a, sizeof a);
    weftSigDescribe(n.sigB, n.whatB, b, sizeof b);
    /* Whatever the fields, a description names a collective (or "?") and its count. */
    if (strstr(a, "(count ") == NULL || strstr(b, "(count ") == NULL) abort();
    if (strlen(a) >= sizeof a || strlen(b) >= sizeof b) abort();
  }
  free(bytes);
  return 0;
}
