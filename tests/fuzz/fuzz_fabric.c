/* weft-sim's fabric description files (tools/sim/fabric.c): any text is refused with a
 * message naming its line, or gives a fabric whose every figure the engine can use; such a
 * fabric's links and the paths between a few ranks stay inside their arrays. */
#include <math.h>
#include <stdio.h>

#include "fuzz_common.h"
#include "sim.h"

static void checkFabric(const struct simFabric *f) {
  if (f->hosts < 1 || f->gpus < 1 || f->nics < 1 || f->hostsPerLeaf < 1) abort();
  const double figures[] = {f->suGBs, f->nicGBs, f->reduceGBs};
  for (size_t i = 0; i < sizeof figures / sizeof figures[0]; i++)
    if (!(figures[i] > 0) || !isfinite(figures[i])) abort();
  if (!(f->suLatUs >= 0) || !(f->nicLatUs >= 0) || !(f->hopUs >= 0) || !(f->overheadUs >= 0)) abort();
  if (f->localSlot == 0 || f->netSlot == 0) abort();
}

/* The links for as many ranks as a few hosts hold, and the paths between their ends. */
static void checkLinks(const struct simFabric *f) {
  int64_t all = (int64_t)f->hosts * f->gpus;
  int n = all < 64 ? (int)all : 64;
  char err[256] = "";
  struct simLinks L;
  if (simLinksInit(&L, f, n, 0, err, sizeof err) != 0) {
    if (err[0] == '\0') abort(); /* a refusal says why */
    return;
  }
  for (int src = 0; src < n; src += n > 8 ? n / 8 : 1)
    for (int dst = 0; dst < n; dst += n > 8 ? n / 8 : 1) {
      struct simPath p;
      simPathOf(&L, src, dst, &p);
      if (p.nlinks < 0 || p.nlinks > SIM_PATH_MAX) abort();
      for (int i = 0; i < p.nlinks; i++)
        if (p.link[i] < 0 || p.link[i] >= L.nlinks) abort();
    }
  simLinksFree(&L);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzzString(data, size);
  struct simFabric f;
  char err[256] = "";
  if (simFabricParse(text, "fuzz", &f, err, sizeof err) == 0) {
    checkFabric(&f);
    checkLinks(&f);
  } else if (strncmp(err, "fuzz:", 5) != 0) {
    abort(); /* every refusal names the file (and its line) */
  }
  free(text);
  return 0;
}
