/* Shared-memory transport: a receiver's setup blob as the sender gets it from the bootstrap. */
#include "fuzz_common.h"
#include "shm/shm.h"
#include "transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *blob = fuzzTake(&data, &size, WEFT_CONN_BLOB_BYTES);
  if (blob == NULL) return 0;
  char name[WEFT_SHM_NAME_BYTES];
  uint64_t slotBytes;
  uint32_t nslots;
  if (weftShmParseBlob(blob, name, &slotBytes, &nslots) == 0) {
    /* A valid name is a NUL-terminated "/weft-..." with no other '/'. */
    size_t len = strlen(name);
    if (len < 6 || len >= WEFT_SHM_NAME_BYTES || memchr(name + 1, '/', len - 1) != NULL) abort();
  }
  free(blob);
  return 0;
}
