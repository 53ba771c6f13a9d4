/* Point-to-point transfers: links between any two ranks, made on their first use (as NCCL's p2p
 * connections), and an engine that moves any set of sends and receives at once, so a group
 * of them completes whatever its pattern (lib/group.c queues them; algorithms/pairwise.c
 * builds AlltoAll, Gather and Scatter on it). */
#ifndef WEFT_P2P_H_
#define WEFT_P2P_H_

#include <stddef.h>
#include <stdint.h>
#include "core.h"

/* One direction of the link to one peer. */
struct weftP2pLink {
  struct weftConn conn;
  int up;           /* connected */
  uint64_t opsDone; /* transfers started on it: the sequence number in each slot's trailer */
  int lastOp;       /* while a run prepares: its latest transfer on this link, -1 none */
};

struct weftP2pLinks {
  struct weftP2pLink *send, *recv; /* indexed by peer rank */
};

/* One transfer: a send of count elements to peer, or a receive from it. sig, when not NULL,
 * is the collective's signature (comm->opSig) that the slots carry and the receiver checks;
 * NULL for a user's Send/Recv, whose slots carry the link's transfer number, count and type. */
struct weftP2pOp {
  int isSend;
  int peer;
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  weftDataType_t type;
  const uint64_t *sig;
  /* progress (the engine's) */
  size_t bytes, moved;
  uint64_t trailer[3];
  int started, finished;
  int streamOut; /* copies to itself stream past the cache (lib/copy.h): set by the engine */
};

/* Runs ops[0..n) to their end: connects the links they need that are not up yet, then moves
 * every transfer as its link allows, round-robin, so no transfer waits behind another. A
 * send and a receive of this rank to itself are paired in order and copied. */
weftResult_t weftP2pRun(struct weftComm *comm, struct weftP2pOp *ops, int n);
/* A run of at most this many transfers allocates nothing (lib/group.c's groups of up to 8
 * calls hand it at most that many). */
#define WEFT_P2P_INLINE_OPS 8

/* A call's misuse that no transfer needs to reveal (a send to this rank itself without its
 * receive): weftInvalidUsage, and the communicator stays usable. */
weftResult_t weftP2pCheck(struct weftComm *comm, struct weftP2pOp *ops, int n);

/* The links of a schedule that runs on these links (the tree's rooted Broadcast and Reduce,
 * algorithms/tree_rooted.c): conns[i] is the link with peers[i] (never this rank), its
 * sending end where isSend[i], else its receiving end. Those not up yet are made as a first
 * transfer makes them (pairwise: the rank at the other end must ask for the same link at the
 * same point of its calls); a peer may appear more than once. The links stay up, shared with
 * Send/Recv and the pairwise collectives: transfers on a link run in call order whoever makes
 * them, and every slot carries the link's slot number (conn->slotSeq), which all of them keep. */
weftResult_t weftP2pLinks(struct weftComm *comm, const int *peers, const int *isSend, int n,
                          struct weftConn **conns);
/* Whether every one of those links is up already (weftP2pLinks would make none). */
int weftP2pLinksUp(const struct weftComm *comm, const int *peers, const int *isSend, int n);

/* Closes and frees every p2p link of comm (destroy, or a failure that closes links). */
void weftP2pClose(struct weftComm *comm);

#endif
