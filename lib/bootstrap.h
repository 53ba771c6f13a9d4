/* Bootstrap: the only out-of-band path. TCP sockets between ranks, authenticated with the
 * 128-bit secret carried in the unique id. */
#ifndef WEFT_BOOTSTRAP_H_
#define WEFT_BOOTSTRAP_H_

#include <stddef.h>
#include <stdint.h>
#include "deadline.h"
#include "weft.h"

struct weftBootstrap;

/* How long a listener (the root's, a rank's) gives an accepted connection to prove the secret,
 * in ms (2000). Not a parameter: tests set it, before any listener exists, to tell apart a
 * listener that waits on a silent stranger from one that does not. Hidden, as the other test
 * hooks are (lib/transport.h). */
__attribute__((visibility("hidden"))) extern int weftBootstrapHandshakeMs;

/* Fills id with this host's bootstrap address (WEFT_SOCKET_IFNAME), a fresh port and a random
 * secret, and starts the root listener thread in this process. The root serves one
 * communicator's worth of ranks, then exits; it also exits after WEFT_TIMEOUT_MS. */
weftResult_t weftBootstrapGetUniqueId(weftUniqueId *id);

/* Connects this rank to the others through the root named by id (or WEFT_COMM_ID, where rank 0
 * starts the root). Fails with weftTimeout if all nranks have not arrived by deadlineMs
 * (a CLOCK_MONOTONIC time in ms, see weftNowMs). */
weftResult_t weftBootstrapInit(const weftUniqueId *id, int rank, int nranks, int64_t deadlineMs,
                               struct weftBootstrap **out);

/* For a grow (weftCommGetUniqueId, weftCommGrow): an id whose root is a fresh one in this
 * process, and an init through the root an id names, both whatever WEFT_COMM_ID says: the
 * communicator that grows may have met at WEFT_COMM_ID, whose root is gone. */
weftResult_t weftBootstrapGetFreshId(weftUniqueId *id);
weftResult_t weftBootstrapInitFromId(const weftUniqueId *id, int rank, int nranks,
                                     int64_t deadlineMs, struct weftBootstrap **out);

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
/* The bootstrap of a communicator of the ranks members[0..n) of parent (distinct, this rank
 * among them, in the new order), which become its ranks 0..n-1: a ring formed through the
 * parent's listeners, with a secret bound to epoch and the member list in its order (members
 * that disagree refuse each other), and a listener of its own. Collective over the members;
 * the parent stays usable. */
weftResult_t weftBootstrapSplit(struct weftBootstrap *parent, const int *members, int n,
                                uint64_t epoch, int64_t deadlineMs, struct weftBootstrap **out);
/* What an agreement is for (bound into its secret with its size). */
enum { WEFT_AGREE_SPLIT = 1, WEFT_AGREE_GROW = 2 };
/* An all-gather over every rank of parent (as weftBootstrapAllGather) on a ring of its own,
 * formed through the parent's listeners and closed on return, so it works whatever state the
 * parent's own ring is in (closed after a failure, carrying signature notes). The secret is
 * bound to epoch, purpose and bytesPerRank: ranks making different calls fail instead of
 * exchanging misread bytes. Collective over every rank of parent; a rank that is dead or
 * dies makes it fail on every rank (its neighbours see it, the others their neighbours
 * leave). */
weftResult_t weftBootstrapAgree(struct weftBootstrap *parent, uint64_t epoch, uint32_t purpose,
                                void *data, size_t bytesPerRank, int64_t deadlineMs);
/* Whether rank's listener still answers: 0 when the connection is refused or the host does
 * not answer within timeoutMs (the rank is gone), else 1. */
int weftBootstrapProbe(const struct weftBootstrap *b, int rank, int64_t timeoutMs);
/* After a failure: closes the ring (peers blocked on it fail in turn) but not the listener,
 * and waits until a dead peer's descriptors have surely all closed, before probes. */
void weftBootstrapCloseRing(struct weftBootstrap *b);
void weftBootstrapSettle(void);
/* Notes: fixed-size records a rank exchanges with its ring neighbours (dir: WEFT_NOTE_NEXT,
 * rank+1, or WEFT_NOTE_PREV, rank-1) over the bootstrap ring once init is over (the ring is
 * idle then), e.g. the signature of the collective it waits in. Never wait.
 * Send: 1 sent (or queued behind a note still leaving), 0 an earlier note still blocks the
 * socket, -1 the ring is closed. Recv: 1 a whole note is in `note`, 0 none yet, -1 closed.
 * Wait: 1 when a neighbour's socket is readable before deadlineMs, else 0 or -1. */
#define WEFT_BOOT_NOTE_BYTES 48
enum { WEFT_NOTE_NEXT = 0, WEFT_NOTE_PREV = 1 };
int weftBootstrapNoteSend(struct weftBootstrap *b, int dir, const uint8_t note[WEFT_BOOT_NOTE_BYTES]);
int weftBootstrapNoteRecv(struct weftBootstrap *b, int dir, uint8_t note[WEFT_BOOT_NOTE_BYTES]);
int weftBootstrapNoteWait(struct weftBootstrap *b, int64_t deadlineMs);
/* Pairwise exchange of small records (transport blobs of connections made on first use).
 * Sends out[i].data to rank out[i].peer with tag out[i].tag, and fills in[j].data with the
 * message rank in[j].peer sent this rank with tag in[j].tag (peer and tag set by the caller).
 * Collective over nothing: only the ranks that exchange messages take part, with any pattern
 * (each lists its messages in any order) and without deadlock: while it waits, it serves
 * every connection any rank makes to this rank's listener, and keeps the messages it was not
 * asked for (in b, at most WEFT_BOOT_STASH_PER_SENDER from each rank) for a later call.
 * Messages from one rank with one tag are delivered in the order it sent them (to the
 * matching in[] entries in index order, then to later calls). A message to itself is copied.
 * Returns when every message of out is stored at its receiver and every entry of in is
 * filled. weftRemoteError naming the rank whose listener refuses connections (it is gone:
 * checked every 250 ms for the ranks this call waits for), that sent a wrong MAC, or that
 * refused a message because it already holds WEFT_BOOT_STASH_PER_SENDER unasked-for ones
 * from this rank; weftTimeout at deadlineMs naming every rank not yet heard from or not yet
 * reached, and what it waited for; weftInvalidUsage when this rank asks itself for a message
 * it has not sent; honours the thread's abort flag as the other waits do. After a failure
 * some of the messages may have been delivered. Not concurrently with another call on b. */
#define WEFT_BOOT_MSG_BYTES 320
#define WEFT_BOOT_STASH_PER_SENDER 64
struct weftBootMsg {
  int peer;     /* the other rank */
  uint32_t tag; /* chosen by the caller; matched with the receiver's request */
  uint8_t data[WEFT_BOOT_MSG_BYTES];
};
weftResult_t weftBootstrapExchange(struct weftBootstrap *b, const struct weftBootMsg *out, int nout,
                                   struct weftBootMsg *in, int nin, int64_t deadlineMs);
/* Closes every socket; never blocks. */
weftResult_t weftBootstrapClose(struct weftBootstrap *b);
/* Closes the ring of a communicator destroyed after it worked, without leaving its
 * connections in TIME_WAIT (weftSocketCloseAbortive): no bootstrap operation is in flight and
 * no peer needs to see an orderly end. Failures close it in order (weftBootstrapCloseRing),
 * so the peers see who left. */
void weftBootstrapCloseRingQuietly(struct weftBootstrap *b);

/* Helpers shared with the other socket users (and tested on their own). */
/* The MAC that proves the secret, for the bootstrap and the transports that authenticate
 * their own connections with it: keyed BLAKE2b (libsodium's crypto_generichash) of msg under
 * a 128-bit key, with a 128-bit tag. The key is a communicator's secret; the first bytes of
 * msg must name what kind of message it is (see lib/boot_auth.c). */
#define WEFT_BOOT_MAC_BYTES 16
void weftBootstrapMac(const uint8_t key[16], const void *msg, size_t len,
                      uint8_t tag[WEFT_BOOT_MAC_BYTES]);
/* Whether two tags are equal, in constant time (sodium_memcmp). */
int weftBootstrapMacEqual(const uint8_t *a, const uint8_t *b);
/* Initialises libsodium once (sodium_init); weftSystemError if it fails. The bootstrap's
 * entry points call it; weftBootstrapMac and the parsers below also initialise it on first
 * use, so they work on their own (tests, fuzzing). */
weftResult_t weftBootstrapCryptoInit(void);
/* Whether interface name matches a WEFT_SOCKET_IFNAME spec (NCCL syntax: "eth,ib" prefixes,
 * "^lo" excludes, "=eth0" exact). An empty spec matches everything. */
int weftIfnameMatches(const char *spec, const char *ifname);

/* ---- Parsers of bytes from other processes (internal; exposed for tests/fuzz) ---- */
#define WEFT_BOOT_ADDR_BYTES 24
#define WEFT_BOOT_HELLO_BYTES 72
#define WEFT_BOOT_REPLY_HEADER_BYTES 32
#define WEFT_BOOT_HELLO_REGISTER 1u
#define WEFT_BOOT_HELLO_RING 2u
#define WEFT_BOOT_HELLO_P2P 3u
/* A point-to-point message on the wire, after its hello (boot_auth.c has the layout). */
#define WEFT_BOOT_P2P_WIRE_BYTES (8 + WEFT_BOOT_MSG_BYTES + 16)
struct weftBootstrapHello {
  uint32_t kind, rank, nranks;
  uint8_t clientNonce[16];
  uint8_t addr[WEFT_BOOT_ADDR_BYTES];
};
/* Checks the magic and the MAC (secret, the listener's 16-byte nonce) of a 72-byte hello and
 * decodes it: NULL, or why it is refused. */
const char *weftBootstrapParseHello(const uint8_t *secret, const uint8_t *serverNonce,
                                    const uint8_t *hello, struct weftBootstrapHello *h);
/* Whether an opened hello may be accepted: its kind, nranks in range (and equal to nranks
 * unless 0), rank below nranks (and equal to rank unless -1). 0, or 1 with why filled. */
int weftBootstrapCheckHello(const struct weftBootstrapHello *h, uint32_t kind, int nranks,
                            int rank, char *why, size_t len);
/* A 24-byte address: 1 an address, 0 none (family 0), -1 malformed. */
int weftBootstrapParseAddr(const uint8_t *in, union weftSockAddr *addr);
/* The root address and the secret of a unique id; weftInvalidArgument if it is not one. */
weftResult_t weftBootstrapParseId(const weftUniqueId *id, union weftSockAddr *root,
                                  uint8_t *secret);
/* A STATUS or ABORT reply's body, the ranks not yet registered (u32 each, ascending, below
 * nranks, at most 16), as "1, 3, 7" in text (always NUL-terminated); 0 when well formed. */
int weftBootstrapParseMissing(const uint8_t *body, size_t bodyLen, int nranks, char *text,
                              size_t textLen);
/* A root reply's 32-byte header for a rank of an nranks communicator: 0, or -1 when the magic,
 * type, body length or rank count (arg) is wrong. */
int weftBootstrapParseReplyHeader(const uint8_t *head, int nranks, uint32_t *type, uint32_t *arg,
                                  size_t *bodyLen);
/* 0 when the header's MAC covers the header, the body and reply number seq. */
int weftBootstrapCheckReplyMac(const uint8_t *secret, const uint8_t *clientNonce,
                               const uint8_t *serverNonce, uint32_t seq, const uint8_t *head,
                               const uint8_t *body, size_t bodyLen);
/* 0 when a ring listener's 16-byte acknowledgement proves the secret for these nonces (the
 * dialer's clientNonce, the listener's serverNonce). */
int weftBootstrapCheckAck(const uint8_t *secret, const uint8_t *clientNonce,
                          const uint8_t *serverNonce, const uint8_t *ack);
/* Checks the magic and the MAC of a point-to-point message received on the connection whose
 * nonces are clientNonce (the dialer's, from its hello) and serverNonce (the listener's) and
 * decodes its tag and data (WEFT_BOOT_MSG_BYTES): NULL, or why it is refused. */
const char *weftBootstrapParseMsg(const uint8_t *secret, const uint8_t *clientNonce,
                                  const uint8_t *serverNonce, const uint8_t *wire, uint32_t *tag,
                                  uint8_t *data);
/* The listener's 16-byte answer to message tag on that connection: 1 when it proves the secret
 * and says the message is stored, 0 when it proves the secret and says it is refused (the
 * listener holds too many unasked-for messages of this sender), -1 when it proves nothing. */
int weftBootstrapCheckMsgReply(const uint8_t *secret, const uint8_t *clientNonce,
                               const uint8_t *serverNonce, uint32_t tag, const uint8_t *reply);
/* Decodes the rank table (nranks addresses) into peers: -1 when every entry is valid, else
 * the first rank without a valid address. */
int weftBootstrapParseTable(const uint8_t *table, int nranks, union weftSockAddr *peers);

#endif
