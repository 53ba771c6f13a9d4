/* WEFT_SOCKET_IFNAME matching: input is "spec\0ifname" (ifname empty when there is no NUL). */
#include "bootstrap.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t specLen = nul ? (size_t)(nul - data) : size;
  char *spec = fuzzString(data, specLen);
  char *ifname = nul ? fuzzString(nul + 1, size - specLen - 1) : fuzzString(data, 0);
  (void)weftIfnameMatches(spec, ifname);
  free(spec);
  free(ifname);
  return 0;
}
