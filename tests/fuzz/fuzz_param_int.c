/* Integer parameters (WEFT_TIMEOUT_MS, WEFT_*_BYTES, ...): weftParseInt on any text. */
#include "fuzz_common.h"
#include "param.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzzString(data, size);
  int64_t v = 0;
  (void)weftParseInt(text, &v);
  free(text);
  return 0;
}
