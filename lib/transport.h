/* The transport interface: static functions in transports/<name>/ behind one exported ops
 * table. The data path is a FIFO of slots; "would block" is success with a NULL result, never
 * a wait inside the transport (all waiting lives in lib/wait.c). */
#ifndef WEFT_TRANSPORT_H_
#define WEFT_TRANSPORT_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "weft.h"
#include "topo.h"

struct weftComm;

#define WEFT_CONN_BLOB_BYTES 256
#define WEFT_HOSTID_BYTES 64

enum weftDir { WEFT_DIR_SEND = 0, WEFT_DIR_RECV = 1 };

/* What every rank tells the others about itself at init. */
struct weftPeerInfo {
  int rank;
  int pid;
  uint64_t hostHash;               /* ranks with equal hostHash share memory */
  /* The kernel's boot_id, hashed (0: unknown): ranks with equal kernelHash share CPUs, even
   * where they stand for different hosts (network namespaces, WEFT_HOSTID emulation). */
  uint64_t kernelHash;
  char hostId[WEFT_HOSTID_BYTES];  /* what hostHash was computed from, for messages */
  char hostname[64];
  int cpus; /* processing units this rank may run on (hwloc) */
  struct weftTopoPlace place; /* where it runs on its host's model (lib/topo.h) */
};

/* A link's performance, for the tuner's cost model (UCX-style performance attributes). */
struct weftLinkCaps {
  double latencyUs;    /* one small message, one hop */
  double bandwidthGBs; /* sustained, one direction */
};

/* What a transport measured of the data it received from one peer, for the straggler
 * report's slow-link verdict (lib/straggler.c): the bytes, and the time slots spent
 * trickling in (from the first bytes of a slot's part to its last, per stream), which a slow
 * link stretches and a late sender does not. Summed from the transport's progress thread;
 * the report reads and clears them once a window. */
struct weftLinkMeter {
  _Atomic int64_t trickleNs;
  _Atomic int64_t bytes;
};

/* One direction of a connection to one peer. The transport owns `priv`. */
struct weftConn {
  const struct weftTransportOps *ops;
  void *state; /* the transport's per-communicator state (from init) */
  int peer;
  int dir;
  size_t slotBytes;
  struct weftLinkCaps caps;
  void *priv;
  struct weftComm *comm; /* whose link this is (lib/connect.c): why it closes comes from there */
  /* Handed down for close() (lib/connect.c's weftConnClose), for transports that tell their
   * peer why this side closes: closeReason is 0 for an orderly close (destroy after success,
   * a failed init: nothing to say), else the code to pass on (weftInvalidUsage for a
   * mismatch, weftRemoteError for an abort, else the communicator's error), and closeCause
   * its text, valid during close() only. Peers print the cause after WEFT_CAUSE_MARK; a
   * cause that already carried it is cut to its origin, so a chain of closes names the first
   * failure however far it travels. */
  int closeReason;
  const char *closeCause;
  /* Slots lib/prims.c has posted (sender) or taken (receiver) on this link: each slot's
   * trailer carries the sender's count, so the receiver notices a lost or repeated slot. */
  uint64_t slotSeq;
};

struct weftTransportOps {
  size_t size;      /* sizeof(struct weftTransportOps), so the table can grow */
  const char *name; /* log tag and WEFT_TRANSPORTS key */
  /* 0 when unusable on this machine, with the reason in why (tests print it as "skipped"). */
  int (*query)(char *why, size_t len);
  /* Per-communicator state; called once by every rank at init. */
  weftResult_t (*init)(struct weftComm *comm, void **state);
  /* Sets *ok to 1 if this transport can link me to peer, and fills caps. Never blocks. */
  weftResult_t (*canConnect)(void *state, const struct weftPeerInfo *me,
                             const struct weftPeerInfo *peer, int *ok, struct weftLinkCaps *caps);
  /* Creates this side's resources for one direction (dir) to peer and writes the blob (at most
   * WEFT_CONN_BLOB_BYTES) the peer's connect() needs. Never blocks. */
  weftResult_t (*setup)(void *state, int peer, int dir, struct weftConn *c, void *blob);
  /* Completes the connection from the peer's blob (the peer's setup for the opposite
   * direction). Never blocks: *done = 0 means call again. */
  weftResult_t (*connect)(struct weftConn *c, const void *peerBlob, int *done);
  /* Called once after every rank of the communicator has connected: drop names that let
   * strangers attach (e.g. unlink shared memory). May be NULL. */
  weftResult_t (*connected)(struct weftConn *c);
  /* Sender: the next free slot (slotBytes writable bytes) or *slot = NULL when the peer has
   * not yet freed one. Never blocks. */
  weftResult_t (*sendSlot)(struct weftConn *c, void **slot);
  /* Sender: publishes the slot returned by the last sendSlot with bytes <= slotBytes. */
  weftResult_t (*sendPost)(struct weftConn *c, size_t bytes);
  /* Receiver: the oldest unread slot and its size, or *slot = NULL when none has arrived.
   * Never blocks. The slot stays valid until recvDone. */
  weftResult_t (*recvSlot)(struct weftConn *c, const void **slot, size_t *bytes);
  /* Receiver: releases the slot returned by the last recvSlot to the sender. */
  weftResult_t (*recvDone)(struct weftConn *c);
  /* Moves data for transports with asynchronous engines; NULL where not needed. */
  weftResult_t (*progress)(void *state);
  /* Frees what setup/connect created for c; c->closeReason and c->closeCause say why this
   * side closes (see struct weftConn). Never blocks. */
  weftResult_t (*close)(struct weftConn *c);
  /* Frees what init created. */
  weftResult_t (*finalize)(void *state);
  /* What this rank uses to reach peer over this transport, for people (the interface and
   * address, the RDMA device and port, ...), into buf (len > 0 bytes, NUL-terminated). May be
   * NULL (nothing more to say than the transport's name). Never blocks. */
  void (*describe)(void *state, int peer, char *buf, size_t len);
  /* The sleep of a wait on c (lib/wait.c, once it has spun and yielded): 1 after waiting at
   * most maxUs, earlier when something may have come on c, so a sleeping rank wakes when its
   * data arrives rather than when its clock runs out; 0 at once where it cannot wait on c (the
   * wait then sleeps on the clock). May be NULL (always the clock). */
  int (*block)(struct weftConn *c, long maxUs);
};

/* What a peer prints before the cause a closing side handed it (closeCause); room for a cause
 * (as much as a communicator's message holds). */
#define WEFT_CAUSE_MARK " closed the connection after its own failure: "
#define WEFT_CLOSE_CAUSE_BYTES 1024

/* The registry (lib/transport_registry.c): transports by preference, NULL-terminated. */
extern const struct weftTransportOps *const weftTransports[];

/* Test hook (tests/fault): a function that may put a wrapper table between the library and the
 * transport chosen for a link. Fault-injection tests need to drop, delay or kill at a chosen
 * step of any transport, present or future, without each transport growing its own fault
 * switches. It is called once per link, in selectTransport (lib/connect.c), with the rank,
 * the link (dir and peer set, nothing set up yet) and the chosen table; it returns the table
 * the link will use. A wrapper must keep the contract of every member it replaces and leave
 * c->state and c->priv to the real transport. Unset (NULL, the default), selection costs one
 * load and the data path is untouched. Hidden: not part of libweft.so's interface; tests link
 * libweft.a. */
typedef const struct weftTransportOps *(*weftTransportInterposer)(
    int rank, const struct weftConn *c, const struct weftTransportOps *chosen);
__attribute__((visibility("hidden"))) void weftTransportInterpose(weftTransportInterposer fn);

#endif
