/* The 128-byte unique id, as weftCommInitRank receives it from the application. */
#include "bootstrap.h"
#include "fuzz_common.h"
#include "socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  weftUniqueId *id = malloc(sizeof *id);
  if (id == NULL) abort();
  memset(id, 0, sizeof *id);
  memcpy(id, data, size < sizeof *id ? size : sizeof *id);
  union weftSockAddr root;
  uint8_t secret[16];
  if (weftBootstrapParseId(id, &root, secret) == weftSuccess) {
    char name[WEFT_SOCK_NAME_MAX];
    weftSockAddrName(&root, name);
  }
  free(id);
  return 0;
}
