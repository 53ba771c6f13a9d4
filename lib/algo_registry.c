/* Adding an algorithm: its file plus one line here (a transport: lib/transport_registry.c).
 * The list sits with the tuner, which chooses among them; nothing below the algorithms names
 * it. */
#include "core.h"

extern const struct weftAlgoOps weftAlgoRing;
extern const struct weftAlgoOps weftAlgoDirect;
extern const struct weftAlgoOps weftAlgoTree;
extern const struct weftAlgoOps weftAlgoHier;
extern const struct weftAlgoOps weftAlgoHierNuma;
extern const struct weftAlgoOps weftAlgoPairwise;

const struct weftAlgoOps *const weftAlgos[] = {
  &weftAlgoRing,
  &weftAlgoDirect,
  &weftAlgoTree,
  &weftAlgoHier,
  &weftAlgoHierNuma,
  &weftAlgoPairwise,
  NULL,
};

int weftAlgoCount(void) {
  int n = 0;
  while (weftAlgos[n] != NULL) n++;
  return n;
}
