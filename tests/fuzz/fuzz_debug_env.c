/* Logging parameters: WEFT_DEBUG_SUBSYS (a comma list, "^" inverts) and WEFT_DEBUG_FILE
 * (%h and %p expanded). Input: out-buffer size u8, host length u8, host, then the spec (used
 * as both parameters). */
#include "fuzz_common.h"
#include "log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t len = (size_t)data[0] * 4 + 1, hostLen = data[1] % 64;
  data += 2;
  size -= 2;
  if (size < hostLen) return 0;
  char *host = fuzzString(data, hostLen);
  char *spec = fuzzString(data + hostLen, size - hostLen);
  (void)weftLogParseSubsys(spec);
  char *path = malloc(len);
  if (path == NULL) abort();
  weftLogParseFilePattern(spec, host, 2147483647, path, len);
  if (strlen(path) >= len) abort();
  free(path);
  free(spec);
  free(host);
  return 0;
}
