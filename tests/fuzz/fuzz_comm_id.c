/* WEFT_COMM_ID: "host:port" / "[ipv6]:port" split and checked before any name is resolved.
 * The first byte picks the host buffer's size, as callers may pass a small one. */
#include "fuzz_common.h"
#include "socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  size_t hostLen = (size_t)data[0] + 1;
  char *text = fuzzString(data + 1, size - 1);
  char *host = malloc(hostLen);
  if (host == NULL) abort();
  uint16_t port = 0;
  if (weftSocketParseHostPort(text, host, hostLen, &port) == 0) {
    if (strlen(host) >= hostLen || port == 0) abort();
  }
  free(host);
  free(text);
  return 0;
}
