/* Adding a transport: its folder plus one line here (an algorithm: lib/algo_registry.c). The
 * list sits just above the transports, with the link code that selects among them. */
#include "core.h"

extern const struct weftTransportOps weftTransportShm;
extern const struct weftTransportOps weftTransportTcp;
#ifdef WEFT_HAVE_VERBS
extern const struct weftTransportOps weftTransportVerbs;
#endif
#ifdef WEFT_HAVE_UCX
extern const struct weftTransportOps weftTransportUcx;
#endif

/* In order of preference: the first that can connect two ranks wins. */
const struct weftTransportOps *const weftTransports[] = {
  &weftTransportShm,
#ifdef WEFT_HAVE_VERBS
  &weftTransportVerbs, /* between hosts where an RDMA port is active */
#endif
#ifdef WEFT_HAVE_UCX
  &weftTransportUcx, /* only where asked for, or where UCX has a network faster than TCP */
#endif
  &weftTransportTcp,
  NULL,
};

int weftTransportCount(void) {
  int n = 0;
  while (weftTransports[n] != NULL) n++;
  return n;
}
