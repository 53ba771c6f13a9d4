/* Communicators made from an existing one without a unique id of the caller's: shrink and
 * recover (lib/shrink.c), split by color (lib/split.c), grow (lib/grow.c). Each makes a child
 * communicator whose init (lib/comm.c) begins with weftSplitBootstrap instead of meeting at a
 * root: the child's bootstrap comes from the parent's (its listeners, its secret), then
 * everything else is the init of any communicator. What they share is in lib/childcomm.c. */
#ifndef WEFT_SPLIT_H_
#define WEFT_SPLIT_H_

#include <stdint.h>
#include "core.h"

enum weftSplitKind { WEFT_SPLIT_SHRINK, WEFT_SPLIT_RECOVER, WEFT_SPLIT_COLOR, WEFT_SPLIT_GROW };

struct weftSplit {
  struct weftComm *parent; /* must outlive the child's init (the API documents it); NULL for a
                              rank that joins a grow */
  enum weftSplitKind kind;
  uint64_t epoch;   /* the parent's splitsBegun when the call began: the same on every rank */
  int *members;     /* parent ranks in the child's rank order: fixed for a shrink, the last view
                       for a recovery, the color's ranks by key once a split has agreed */
  int n;
  int *excludedOut, *excludedCountOut; /* recover: the caller's */
  int color, key;                      /* split */
  int growRanks;                       /* grow: the size of the new communicator */
  int growRoot;                        /* grow: this rank passed the id */
  weftUniqueId growId;                 /* grow: the id, the root's (agreed) */
  int64_t deadlineMs; /* split: a NOCOLOR rank's part, run in the parent's operation thread */
};

/* A split of parent of this kind, with room for parent->nranks members; consumes an epoch. */
struct weftSplit *weftSplitNew(struct weftComm *parent, enum weftSplitKind kind);
/* The checks every call on a parent makes: a live, initialized parent, newcomm not NULL (set
 * to NULL), the settings (weftSettingsCheck). Reports to comm. */
weftResult_t weftSplitCheckParent(struct weftComm *comm, weftComm_t *newcomm, const char *api);
/* config over the parent's defaults (its timeout, blocking). */
weftResult_t weftSplitConfig(const struct weftComm *parent, const weftConfig_t *config,
                             int *blocking, int64_t *timeoutMs);
/* Starts the child's init with s (freed with the child, or here on failure). rank and nranks
 * may be placeholders the bootstrap replaces (recover, split). weftInProgress when not
 * blocking. */
weftResult_t weftSplitStartChild(struct weftSplit *s, int rank, int nranks, int blocking,
                                 int64_t timeoutMs, weftComm_t *newcomm);
/* After a failure rc that involved the parent's ranks: when some of them are gone (their
 * process on this host, their listener elsewhere), weftRemoteError naming them with what rc
 * said; else rc unchanged. A bad argument or usage stays what it is. */
weftResult_t weftSplitNameGone(struct weftComm *parent, weftResult_t rc);

/* The bootstraps of each kind, called by weftSplitBootstrap on the child. */
weftResult_t weftRecoverBootstrap(struct weftComm *comm); /* lib/shrink.c */
weftResult_t weftSplitColorBootstrap(struct weftComm *comm); /* lib/split.c */
weftResult_t weftGrowBootstrap(struct weftComm *comm);       /* lib/grow.c */

#endif
