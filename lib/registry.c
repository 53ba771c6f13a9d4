/* Adding a transport or an algorithm: its folder or file plus one line here. */
#include "core.h"

extern const struct weftTransportOps weftTransportShm;
extern const struct weftTransportOps weftTransportTcp;
extern const struct weftAlgoOps weftAlgoRing;
extern const struct weftAlgoOps weftAlgoDirect;
extern const struct weftAlgoOps weftAlgoTree;
extern const struct weftAlgoOps weftAlgoHier;
extern const struct weftAlgoOps weftAlgoPairwise;

/* In order of preference: the first that can connect two ranks wins. */
const struct weftTransportOps *const weftTransports[] = {
  &weftTransportShm,
  &weftTransportTcp,
  NULL,
};

const struct weftAlgoOps *const weftAlgos[] = {
  &weftAlgoRing,
  &weftAlgoDirect,
  &weftAlgoTree,
  &weftAlgoHier,
  &weftAlgoPairwise,
  NULL,
};

int weftTransportCount(void) {
  int n = 0;
  while (weftTransports[n] != NULL) n++;
  return n;
}

int weftAlgoCount(void) {
  int n = 0;
  while (weftAlgos[n] != NULL) n++;
  return n;
}
