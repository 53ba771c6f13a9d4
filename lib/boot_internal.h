/* Bootstrap internals shared by its files; bootstrap.h is the interface its users see.
 *
 *   bootstrap.c      entry points: the unique id, the rendezvous, init, close
 *   boot_auth.c      the messages that prove the secret (hellos, replies, acks), their MACs,
 *                    the secrets derived from a text or a split, nonces
 *   boot_listen.c    a listener's connections that have not proven the secret yet
 *   boot_root.c      the root thread: registration, progress reports, the table
 *   boot_register.c  a rank's registration with the root
 *   boot_dial.c      the dialing side of a handshake (the ring's and the messages')
 *   boot_serve.c     what a rank's listener holds between calls: connections proving the
 *                    secret, ring hellos kept for the next ring, messages coming in, the
 *                    messages kept for a later weftBootstrapExchange
 *   boot_ring.c      forming the ring; AllGather, Barrier and notes over it
 *   boot_p2p.c       weftBootstrapExchange: messages between any two ranks
 *   boot_split.c     splits (shrink), probes of a rank's listener, naming the gone ranks
 */
#ifndef WEFT_BOOT_INTERNAL_H_
#define WEFT_BOOT_INTERNAL_H_

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "bootstrap.h"
#include "socket.h"

enum {
  NONCE_BYTES = 16,
  SECRET_BYTES = 16,
  MAC_BYTES = WEFT_BOOT_MAC_BYTES,
  ADDR_BYTES = 24,
  HELLO_MAC_OFFSET = 4,
  HELLO_PAYLOAD_OFFSET = HELLO_MAC_OFFSET + MAC_BYTES,
  HELLO_PAYLOAD_BYTES = 12 + NONCE_BYTES + ADDR_BYTES,
  HELLO_BYTES = HELLO_PAYLOAD_OFFSET + HELLO_PAYLOAD_BYTES,
  REPLY_MACED_HEADER_BYTES = 16,
  REPLY_MAC_OFFSET = REPLY_MACED_HEADER_BYTES,
  REPLY_HEADER_BYTES = REPLY_MAC_OFFSET + MAC_BYTES,
  ACK_BYTES = MAC_BYTES,
  MSG_BYTES = WEFT_BOOT_MSG_BYTES,
  MSG_DATA_OFFSET = 8,
  MSG_MAC_OFFSET = MSG_DATA_OFFSET + MSG_BYTES,
  MSG_WIRE_BYTES = MSG_MAC_OFFSET + MAC_BYTES,
  /* 2: 128-bit BLAKE2b MACs (the hello, reply and ack layouts grew); 1 had 64-bit SipHash. */
  ID_VERSION = 2,
};
_Static_assert(HELLO_BYTES == WEFT_BOOT_HELLO_BYTES && ADDR_BYTES == WEFT_BOOT_ADDR_BYTES &&
                   ADDR_BYTES == WEFT_SOCK_WIRE_BYTES &&
                   REPLY_HEADER_BYTES == WEFT_BOOT_REPLY_HEADER_BYTES,
               "bootstrap.h sizes");
_Static_assert(MSG_WIRE_BYTES == WEFT_BOOT_P2P_WIRE_BYTES, "bootstrap.h message size");
#define ID_MAGIC 0x57465449u    /* "WFTI" */
#define HELLO_MAGIC 0x57465448u /* "WFTH" */
#define REPLY_MAGIC 0x57465452u /* "WFTR" */
#define MSG_MAGIC 0x57465450u   /* "WFTP" */
enum helloKind {
  HELLO_REGISTER = WEFT_BOOT_HELLO_REGISTER,
  HELLO_RING = WEFT_BOOT_HELLO_RING,
  HELLO_P2P = WEFT_BOOT_HELLO_P2P,
};
enum replyType { REPLY_STATUS = 1, REPLY_TABLE = 2, REPLY_ABORT = 3, REPLY_LOST = 4 };

/* Ranks not yet registered that a STATUS or ABORT names (the lowest ones): enough to find
 * the culprits, and a body that stays small however many ranks there are. */
#define MISSING_LISTED 16
#define MAX_RANKS (1 << 20)
/* What a registered rank sends the root when it leaves at its own timeout. */
#define GIVE_UP_BYTE 0x54 /* 'T' */
/* How long a probe of a rank's listener waits for an answer (the ring, naming gone ranks). */
#define RING_PROBE_TIMEOUT_MS 200

/* Connections accepted by a listener that have not yet proven the secret. */
struct pendingPeer {
  int fd;
  int64_t deadlineMs; /* dropped as silent after this */
  uint8_t nonce[NONCE_BYTES];
  uint8_t hello[HELLO_BYTES];
  size_t helloLen;
  char name[WEFT_SOCK_NAME_MAX];
};

struct pendingSet {
  struct pendingPeer *peers;
  size_t count, cap;
  char owner[WEFT_SOCK_NAME_MAX + 32]; /* the listener, for log lines */
};

/* A message coming in on a connection whose hello proved the secret: its bytes, then the
 * listener's answer (stored, or refused). */
struct inboundMsg {
  int fd;
  int from;           /* the sender's rank (its hello) */
  int64_t deadlineMs; /* dropped as stalled after this */
  uint8_t clientNonce[NONCE_BYTES], serverNonce[NONCE_BYTES];
  uint8_t wire[MSG_WIRE_BYTES];
  size_t got;
  uint8_t reply[ACK_BYTES];
  size_t replySent;
  int replying;
  char name[WEFT_SOCK_NAME_MAX];
};

struct stashedMsg {
  int from;
  uint32_t tag;
  uint8_t data[MSG_BYTES];
};

/* The requests of the weftBootstrapExchange in progress, which incoming messages fill. */
struct bootWants {
  struct weftBootMsg *in;
  int nin, left;
  uint8_t *filled;
  int badFrom; /* a rank this call waits for that sent a message with a wrong MAC, or -1 */
};

/* What a rank's listener holds between bootstrap calls. Both weftBootstrapExchange and the
 * formation of a ring through this listener (a split) serve it, so neither loses the other's
 * connections: a ring hello arriving during an exchange is kept for the ring (the exchange
 * cannot check it: a split's secret is not this bootstrap's), and a message arriving while a
 * ring forms is stored for a later exchange. */
struct bootServer {
  struct pendingSet pending;    /* accepted; their hello is not complete */
  struct pendingSet ringHellos; /* complete ring hellos, for the next ring formed here */
  struct inboundMsg *inbound;
  size_t ninbound, inboundCap;
  int *closing; /* answered: closed once the dialer resets (no TIME_WAIT here) */
  size_t nclosing, closingCap;
  struct stashedMsg *stash; /* messages not asked for yet, in arrival order */
  size_t nstash, stashCap;
  uint16_t *stashFrom; /* stashed messages per sender (nranks), allocated on first use */
  struct bootWants *wants;
};

struct weftBootstrap {
  int rank, nranks;
  int nextFd;                /* connection to rank+1: this rank sends on it */
  int prevFd;                /* connection from rank-1: this rank receives on it */
  union weftSockAddr *peers; /* each rank's listen address */
  uint8_t secret[SECRET_BYTES]; /* kept for transports that authenticate their own sockets */
  /* Open for the communicator's life: weftBootstrapSplit forms the rings of shrunk
   * communicators through it, and its refusing connections is how survivors tell a dead
   * rank from a live one (weftBootstrapProbe). */
  int listenFd;
  union weftSockAddr listenAddr;
  /* Notes to and from each ring neighbour once init is over (weftBootstrapNoteSend/Recv). */
  struct weftBootstrapNotes {
    uint8_t in[WEFT_BOOT_NOTE_BYTES], out[WEFT_BOOT_NOTE_BYTES];
    size_t inLen, outLen, outSent;
  } notes[2];
  struct bootServer serve; /* listenFd's connections and messages (boot_serve.c) */
};

/* Where the ranks meet: the unique id, or WEFT_COMM_ID + WEFT_COMM_SECRET. */
struct rendezvous {
  union weftSockAddr root;
  char rootName[WEFT_SOCK_NAME_MAX];
  uint8_t secret[SECRET_BYTES];
  int fromCommId; /* WEFT_COMM_ID mode: rank 0 starts the root */
};

static inline int nextRank(const struct weftBootstrap *b) { return (b->rank + 1) % b->nranks; }
static inline int prevRank(const struct weftBootstrap *b) {
  return (b->rank + b->nranks - 1) % b->nranks;
}
static inline const char *peerName(const struct weftBootstrap *b, int rank,
                                   char name[WEFT_SOCK_NAME_MAX]) {
  return weftSockAddrName(&b->peers[rank], name);
}

/* A poll() list that grows. */
struct pollList {
  struct pollfd *fds;
  size_t count, cap;
};

/* The dialing side of a handshake: connect, receive the listener's nonce, send a hello (and
 * what follows it), receive the listener's 16-byte answer. Never blocks. */
enum dialState {
  DIAL_CONNECTING,
  DIAL_AWAIT_NONCE,
  DIAL_COMPOSE, /* the nonce is in: the caller writes what to send (weftBootDialHello ...) */
  DIAL_SEND,
  DIAL_AWAIT_ACK,
  DIAL_ACKED, /* the answer is in `in`: the caller checks it */
};
struct bootDial {
  int fd;
  enum dialState state;
  uint8_t serverNonce[NONCE_BYTES], clientNonce[NONCE_BYTES];
  uint8_t out[HELLO_BYTES + MSG_WIRE_BYTES];
  size_t outLen;
  uint8_t in[ACK_BYTES]; /* the nonce, then the answer */
  size_t done;           /* bytes of the current step moved */
};
_Static_assert(NONCE_BYTES == ACK_BYTES, "the nonce and the answer share a buffer");

/* The poll entries of a listener and what it holds (weftBootServePolls), in this order. */
struct servePolls {
  size_t listen, pending, npending, inbound, ninbound, closing, nclosing;
};

/* What the loop serving a listener does with a complete hello that is no message for this
 * bootstrap (a ring's): takes peer i out of set, or drops it. */
typedef void (*bootHelloFn)(void *ctx, struct pendingSet *set, size_t i);

#pragma GCC visibility push(hidden)

/* ---- boot_auth.c ---- */
weftResult_t weftBootRandom(void *buf, size_t len);
/* The hello of rank (kind HELLO_REGISTER or HELLO_RING) to a listener that sent serverNonce. */
void weftBootHelloBuild(uint8_t out[HELLO_BYTES], const uint8_t *secret,
                        const uint8_t *serverNonce, uint32_t kind, int rank, int nranks,
                        const uint8_t *clientNonce, const uint8_t *addr);
/* A reply's MAC covers the body through its digest, so a table sent to every rank is hashed
 * once, not once per rank. */
void weftBootBodyDigest(const uint8_t *secret, const uint8_t *body, size_t len,
                        uint8_t digest[MAC_BYTES]);
/* Reply number seq on the connection whose nonces are clientNonce and serverNonce. */
void weftBootReplyBuild(uint8_t head[REPLY_HEADER_BYTES], const uint8_t *secret,
                        const uint8_t *clientNonce, const uint8_t *serverNonce, uint32_t seq,
                        uint32_t type, uint32_t arg, size_t bodyLen, const uint8_t *digest);
/* A point-to-point message (tag, MSG_BYTES of data) on the connection with these nonces. */
void weftBootMsgBuild(uint8_t wire[MSG_WIRE_BYTES], const uint8_t *secret,
                      const uint8_t *clientNonce, const uint8_t *serverNonce, uint32_t tag,
                      const uint8_t *data);
/* The listener's answer to it: stored (accepted) or refused (weftBootstrapCheckMsgReply). */
void weftBootMsgReplyBuild(uint8_t reply[ACK_BYTES], const uint8_t *secret,
                           const uint8_t *clientNonce, const uint8_t *serverNonce, uint32_t tag,
                           int accepted);
/* A ring listener's acknowledgement of rank-1's hello (checked by weftBootstrapCheckAck). */
void weftBootAckBuild(uint8_t ack[ACK_BYTES], const uint8_t *secret, const uint8_t *clientNonce,
                      const uint8_t *serverNonce);
/* The 128-bit secret of a text (WEFT_COMM_SECRET). */
void weftBootDeriveSecret(const char *text, uint8_t *secret);
/* The parent's secret bound to the epoch and the member list of a split. */
void weftBootSplitSecret(const uint8_t *parent, uint64_t epoch, const int *members, int n,
                         uint8_t *out);

/* ---- boot_listen.c ---- */
int weftBootPollAdd(struct pollList *list, int fd, short events);
void weftBootPendingDrop(struct pendingSet *set, size_t i, int level, const char *why);
/* Removes peer i from the set without closing its connection, which the caller now owns. */
int weftBootPendingTake(struct pendingSet *set, size_t i);
void weftBootPendingClear(struct pendingSet *set, const char *why);
void weftBootPendingFree(struct pendingSet *set);
/* Drops the peers whose handshake time is over. */
void weftBootPendingExpire(struct pendingSet *set, int64_t now);
/* The earliest of deadlineMs and the peers' handshake deadlines. */
int64_t weftBootPendingEarliest(const struct pendingSet *set, int64_t deadlineMs);
/* Accepts what listenFd has (a bounded number per call), greeting each with its nonce. */
void weftBootPendingAcceptAll(struct pendingSet *set, int listenFd);
/* Reads what peer i sent: 1 once a whole hello is in, 0 while incomplete, -1 when dropped. */
int weftBootPendingReceive(struct pendingSet *set, size_t i);
/* Moves peer i of from into to (its connection and hello as they are); when to holds max
 * peers, its oldest is dropped first. */
void weftBootPendingMove(struct pendingSet *from, size_t i, struct pendingSet *to, size_t max);

/* ---- boot_dial.c ---- */
/* Starts connecting: 0, or an errno (d->fd is -1 then). */
int weftBootDialStart(struct bootDial *d, const union weftSockAddr *to);
short weftBootDialEvents(const struct bootDial *d);
/* Advances as far as the socket allows and stops at DIAL_COMPOSE and DIAL_ACKED: 0, or the
 * socket's outcome (WEFT_SOCK_CLOSED or an errno). */
int weftBootDialProgress(struct bootDial *d);
/* At DIAL_COMPOSE: a fresh client nonce and the hello in d->out; the caller may append to
 * d->out (growing d->outLen) before the next weftBootDialProgress sends it all. */
weftResult_t weftBootDialHello(struct bootDial *d, const uint8_t *secret, uint32_t kind, int rank,
                               int nranks, const union weftSockAddr *listenAddr);
/* What the dialer is waiting for, for messages ("waiting for the nonce of"). */
const char *weftBootDialWaitingFor(enum dialState state);

/* ---- boot_serve.c ---- */
/* Names b's listener in log lines, once it exists. */
void weftBootServeStart(struct weftBootstrap *b);
/* Appends the listener and the connections it holds to polls (at p). 0, or -1 out of memory. */
int weftBootServePolls(struct weftBootstrap *b, struct pollList *polls, struct servePolls *p);
/* Handles what poll reported on them: accepts, reads hellos and messages, stores messages
 * (into b->serve.wants first), answers, closes; a complete hello that is no message for b goes
 * to other. */
void weftBootServeHandle(struct weftBootstrap *b, const struct pollList *polls,
                         const struct servePolls *p, bootHelloFn other, void *ctx);
/* The earliest of deadlineMs and the deadlines of what the listener holds; drops what is past
 * its deadline. */
int64_t weftBootServeEarliest(const struct weftBootstrap *b, int64_t deadlineMs);
void weftBootServeExpire(struct weftBootstrap *b, int64_t now);
/* Closes the answered connections whose dialer has reset them already (never waits). */
void weftBootServeSweep(struct weftBootstrap *b);
/* A message for this rank (from a peer or itself): fills the first matching unfilled request
 * of b->serve.wants, else is stashed. 0, or -1 when the stash holds
 * WEFT_BOOT_STASH_PER_SENDER messages of from already (or memory is short): refused. */
int weftBootServeDeliver(struct weftBootstrap *b, int from, uint32_t tag, const uint8_t *data);
/* Fills the requests of wants that stashed messages match, oldest first. */
void weftBootServeTakeStashed(struct weftBootstrap *b, struct bootWants *wants);
/* Closes and frees everything the listener holds (weftBootstrapClose). */
void weftBootServeFree(struct weftBootstrap *b);

/* ---- boot_root.c ---- */
/* Binds the root's listener at addr (port 0: ephemeral) and starts its detached thread. */
weftResult_t weftBootRootStart(const union weftSockAddr *addr, const uint8_t *secret,
                               int64_t deadlineMs, union weftSockAddr *bound);

/* ---- boot_register.c ---- */
/* Registers with the root and fills b->peers with the table it sends. */
weftResult_t weftBootRegister(const struct rendezvous *rv, struct weftBootstrap *b,
                              const union weftSockAddr *listenAddr, int64_t startMs,
                              int64_t deadlineMs);

/* ---- boot_ring.c ---- */
/* Forms b's ring (b->peers known), authenticated with b->secret, through the listener of
 * owner (b itself at init, the parent of a split), whose connections it serves meanwhile. */
weftResult_t weftBootFormRing(struct weftBootstrap *b, struct weftBootstrap *owner, int64_t startMs,
                              int64_t deadlineMs);

/* ---- boot_split.c ---- */
/* After a failure of init: closes the ring and adds to the thread's last error the ranks
 * whose listeners refuse connections. */
void weftBootNameGoneRanks(struct weftBootstrap *b);

#pragma GCC visibility pop

#endif
