/* Bootstrap: the only out-of-band path. TCP sockets between ranks, authenticated with the
 * 128-bit secret carried in the unique id. */
#ifndef WEFT_BOOTSTRAP_H_
#define WEFT_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>
#include "weft.h"

struct weftBootstrap;

/* Fills id with this host's bootstrap address (WEFT_SOCKET_IFNAME), a fresh port and a random
 * secret, and starts the root listener thread in this process. The root serves one
 * communicator's worth of ranks, then exits; it also exits after WEFT_TIMEOUT_MS. */
weftResult_t weftBootstrapGetUniqueId(weftUniqueId *id);

/* Connects this rank to the others through the root named by id (or WEFT_COMM_ID, where rank 0
 * starts the root). Fails with weftTimeout if all nranks have not arrived by deadlineMs
 * (a CLOCK_MONOTONIC time in ms, see weftNowMs). */
weftResult_t weftBootstrapInit(const weftUniqueId *id, int rank, int nranks, int64_t deadlineMs,
                               struct weftBootstrap **out);

/* In place: data holds nranks blocks of bytesPerRank; block [rank] is this rank's on entry,
 * all blocks are filled on return. */
weftResult_t weftBootstrapAllGather(struct weftBootstrap *b, void *data, size_t bytesPerRank,
                                    int64_t deadlineMs);
weftResult_t weftBootstrapBarrier(struct weftBootstrap *b, int64_t deadlineMs);
/* The communicator's 128-bit secret (16 bytes), for transports that authenticate their own
 * connections the way the bootstrap does. Valid until weftBootstrapClose. */
const uint8_t *weftBootstrapSecret(const struct weftBootstrap *b);
/* The address of rank's bootstrap listener (for this rank: the interface picked by
 * WEFT_SOCKET_IFNAME, or toward the root), or NULL where unknown (a one-rank communicator). */
union weftSockAddr;
const union weftSockAddr *weftBootstrapPeerAddr(const struct weftBootstrap *b, int rank);
/* Closes every socket; never blocks. */
weftResult_t weftBootstrapClose(struct weftBootstrap *b);

/* Helpers shared with the other socket users (and tested on their own). */
int64_t weftNowMs(void);
/* SipHash-2-4 of msg under a 128-bit key: the MAC that proves the secret. */
uint64_t weftSipHash(const uint8_t key[16], const void *msg, size_t len);
/* Whether interface name matches a WEFT_SOCKET_IFNAME spec (NCCL syntax: "eth,ib" prefixes,
 * "^lo" excludes, "=eth0" exact). An empty spec matches everything. */
int weftIfnameMatches(const char *spec, const char *ifname);

#endif
