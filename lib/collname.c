#include "collname.h"

static const char *const collNames[weftNumColls] = {
  "AllReduce", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AlltoAll", "Gather", "Scatter",
};

const char *weftCollName(weftColl_t coll) {
  return (int)coll >= 0 && coll < weftNumColls ? collNames[coll] : "?";
}
