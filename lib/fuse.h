/* Small AllReduces queued together in one group run as one (lib/fuse.c). */
#ifndef WEFT_FUSE_H_
#define WEFT_FUSE_H_

#include "group.h"

/* How many of the n tasks from tasks[0] run as one fused AllReduce (1: tasks[0] alone). */
int weftFuseCount(const struct weftTask *tasks, int n);
/* Runs k (> 1) fusable tasks, as weftFuseCount found them, as one AllReduce on comm. */
weftResult_t weftFuseRun(struct weftComm *comm, const struct weftTask *tasks, int k);

#endif
