/* The topology fixtures of tests/data and places on them (topofix.h). */
#include "topofix.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *topoFixturePath(const char *name) {
  static char paths[4][600];
  static int next;
  char *out = paths[next++ % 4], exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    for (int up = 0; up < 4; up++) { /* the binary, its folder, tests, build */
      char *slash = strrchr(exe, '/');
      if (slash != NULL) *slash = '\0';
    }
    snprintf(out, sizeof paths[0], "%s/tests/data/%s", exe, name);
    if (access(out, R_OK) == 0) return out;
  }
  snprintf(out, sizeof paths[0], "tests/data/%s", name);
  return out;
}

void topoPlaceOnCore(const struct weftTopoHost *h, int c, struct weftTopoPlace *p) {
  uint8_t cpus[WEFT_TOPO_CPUSET_BYTES] = {0};
  for (int pu = 0; pu < h->puMax; pu++)
    if (h->puCore[pu] == c) cpus[pu / 8] |= (uint8_t)(1u << (pu % 8));
  weftTopoPlaceOfCpus(h, cpus, sizeof cpus, p);
}
