/* Ranks as forked processes that control their own init (environment, timing, kills), each
 * reporting into memory shared with the test. */
#ifndef WEFT_TEST_FORKED_H_
#define WEFT_TEST_FORKED_H_

#include <stddef.h>
#include <sys/types.h>
#include "weft.h"

/* Runs in each child; must not return (end with _exit). */
typedef void (*forkedMain)(void *shared, weftUniqueId id, int rank, int nranks);

/* Maps `bytes` of zeroed memory shared with the children (exits on failure). */
void *forkedShared(size_t bytes);
/* Forks nranks children running main, then makes the unique id and hands it to them (no
 * child inherits the bootstrap root's thread). pids gets the children. */
void forkedLaunch(int nranks, forkedMain main, void *shared, pid_t *pids);
/* Waits up to timeoutMs for the children to exit, then kills and reaps what is left. */
void forkedReap(pid_t *pids, int nranks, int timeoutMs);
int64_t forkedNowMs(void);

#endif
