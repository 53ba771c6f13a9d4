/* Where the pages of the direct algorithm's segment go on a host of several NUMA nodes.
 * Each part of the segment has one writer and is read by many: rank r's staging halves are
 * written (all of each round's chunk) by r alone and read by every rank, each reading the
 * slice it reduces, or by every rank in full on the small and Broadcast paths; rank r's share
 * of a result half is written by r (its reduced slice) and read by every rank. Readers sit on
 * every node, so no reader's node serves them all better than another; the writer's node
 * makes its writes local and leaves the readers as they were. So each rank's staging and its
 * share of the result go on the writer's NUMA node (weftTopoMemNode of its place: only where
 * the host has several nodes, the rank's binding lies in one and the model is this machine's).
 * The header (fail word, every rank's flags) spans few lines that every rank polls, and stays
 * on first touch. The creator binds every rank's parts before a page is allocated
 * (weftShmCreatePlaced), so the policy places them whoever touches them first. */
#include <stdlib.h>
#include <string.h>

#include "direct.h"
#include "log.h"
#include "topo.h"

size_t weftDirectHeaderBytes(int n) {
  size_t bytes = sizeof(struct directFailLine) + sizeof(struct directCtrl) * (size_t)n;
  return (bytes + DIRECT_PAGE_BYTES - 1) / DIRECT_PAGE_BYTES * DIRECT_PAGE_BYTES;
}

/* The whole pages of [off, off + len), or 0 when it holds none. */
static int wholePages(size_t off, size_t len, size_t page, struct directSpan *out) {
  size_t first = (off + page - 1) / page * page, end = (off + len) / page * page;
  if (end <= first) return 0;
  out->off = first;
  out->len = end - first;
  return 1;
}

int weftDirectSpansOf(int n, size_t chunkBytes, size_t pageBytes, int rank, struct directSpan *spans) {
  size_t staging = weftDirectHeaderBytes(n), result = staging + (size_t)n * 2 * chunkBytes;
  int k = wholePages(staging + (size_t)rank * 2 * chunkBytes, 2 * chunkBytes, pageBytes, &spans[0]);
  size_t first, len; /* rank's slice of a full chunk, as the reductions cut it */
  weftDirectSliceOf(chunkBytes, 1, n, rank, &first, &len);
  for (int half = 0; half < 2; half++)
    k += wholePages(result + (size_t)half * chunkBytes + first, len, pageBytes, &spans[k]);
  return k;
}

int weftDirectPlacement(const struct directPlaceArgs *p, size_t pageBytes, struct directSpan *spans) {
  int k = 0;
  for (int r = 0; r < p->n; r++) {
    int node = weftTopoMemNode(p->host, &p->places[r]);
    if (node < 0) continue;
    int got = weftDirectSpansOf(p->n, p->chunkBytes, pageBytes, r, &spans[k]);
    for (int i = 0; i < got; i++) spans[k + i].node = node, spans[k + i].rank = r;
    k += got;
  }
  return k;
}

void weftDirectPlaceSegment(void *seg, size_t bytes, void *arg) {
  const struct directPlaceArgs *p = arg;
  if (p->host == NULL) return;
  struct directSpan *spans = calloc((size_t)p->n * DIRECT_SPANS_PER_RANK, sizeof *spans);
  if (spans == NULL) return; /* first touch places them: slower, never wrong */
  int k = weftDirectPlacement(p, DIRECT_PAGE_BYTES, spans), failed = 0, err = 0;
  for (int i = 0; i < k; i++) {
    if (spans[i].off + spans[i].len > bytes) continue;
    int e = weftTopoBindMemory((char *)seg + spans[i].off, spans[i].len, spans[i].node);
    if (e != 0) failed++, err = e;
  }
  if (k > 0)
    INFO(WEFT_TOPO, "direct: each rank's staging and result share on its NUMA node (%d parts, "
         "first rank %d on node %d)%s%s", k, spans[0].rank, spans[0].node,
         failed ? "; mbind failed: " : "", failed ? strerror(err) : "");
  free(spans);
}
