/* TCP transport internals shared by the transports/tcp files (and its white-box tests).
 * The design, the wire protocol and the parameters are described in docs/transports/tcp.md. */
#ifndef WEFT_TCP_H_
#define WEFT_TCP_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "socket.h"
#include "bytes.h"
#include "transport.h"

#define TCP_MAX_SLOTS 64
#define TCP_MAX_SOCKS 16
#define TCP_SECRET_BYTES 16
#define TCP_NONCE_BYTES 16
#define TCP_ADDR_BYTES 24
#define TCP_ERROR_BYTES 640
#define TCP_HOST_BYTES 64

/* Wire constants; integers are big-endian. */
#define TCP_BLOB_MAGIC 0x57544342u     /* "WTCB": a connection blob */
#define TCP_GREETING_MAGIC 0x57544353u /* "WTCS": listener -> dialer, then the server nonce */
#define TCP_HELLO_MAGIC 0x57544348u    /* "WTCH": dialer -> listener */
/* 2: 128-bit BLAKE2b MACs in the hello and the ack (1 had 64-bit SipHash). */
#define TCP_BLOB_VERSION 2
#define TCP_BLOB_BYTES 64
#define TCP_GREETING_BYTES (4 + TCP_NONCE_BYTES)
#define TCP_MAC_BYTES 16 /* WEFT_BOOT_MAC_BYTES: the bootstrap's MAC (weftBootstrapMac) */
#define TCP_HELLO_MAC_OFFSET 4
#define TCP_HELLO_PAYLOAD_OFFSET (TCP_HELLO_MAC_OFFSET + TCP_MAC_BYTES)
#define TCP_HELLO_PAYLOAD_BYTES 56
#define TCP_HELLO_BYTES (TCP_HELLO_PAYLOAD_OFFSET + TCP_HELLO_PAYLOAD_BYTES)
#define TCP_ACK_BYTES TCP_MAC_BYTES
#define TCP_SLOT_HEADER_BYTES 8 /* bytes u32 | slot sequence number u32, on stream 0 */

/* A close record: why a rank closes a connection after a failure (or an abort), so that its
 * peer reports the cause (the dead rank and its host, both mismatched signatures) and its
 * code instead of a bare "closed by peer". On stream 0 in either direction: from a sender in
 * place of the next slot header (the mark is never a slot size), from a receiver on the
 * otherwise unused way back. mark u32 | reason u32 (a weftResult_t) | note length u32 | note. */
#define TCP_CLOSE_MARK 0xFFFFFFFFu
#define TCP_RECORD_HEAD_BYTES 12
#define TCP_NOTE_BYTES 400
#define TCP_RECORD_BAD (-100) /* weftTcpRecordRecv: the bytes are not a close record */
/* How a message built from a peer's record introduces the cause it carries; a rank passing a
 * cause on sends only what follows the last one, so the note never nests. */
#define TCP_CAUSE_MARK WEFT_CAUSE_MARK

/* What both ends of a connection must agree on; carried by both blobs and every hello. */
struct tcpShape {
  uint64_t slotBytes;
  uint32_t nslots, nsocks, minStripe;
};

/* A setup blob. The receiver's names its listener and the connection; the sender's only
 * carries its rank and shape, so the receiver can check them. */
struct tcpBlob {
  uint32_t dir;
  uint32_t rank;
  struct tcpShape shape;
  uint64_t connId;           /* receiver: the connection's key at its listener */
  union weftSockAddr listen; /* receiver: where to dial */
};

/* A dialer's hello, once its MAC has been checked. */
struct tcpHello {
  uint64_t connId;
  uint32_t fromRank, toRank, stream;
  struct tcpShape shape;
  uint8_t clientNonce[TCP_NONCE_BYTES];
};

/* Dialing side of one stream's handshake, driven by the sender's connect() calls. */
enum tcpDialState {
  TCP_DIAL_CONNECTING,
  TCP_DIAL_GREETING,
  TCP_DIAL_HELLO,
  TCP_DIAL_ACK,
  TCP_DIAL_DONE
};

struct tcpStream {
  int fd;
  int ready;    /* the last I/O did not hit EAGAIN: try again before polling */
  int closed;   /* EOF or an error was seen: no more I/O */
  int pollIdx;  /* in the progress thread's poll array, -1 when not polled */
  uint64_t pos; /* slots this stream has finished */
  size_t done;  /* bytes of the current slot's part moved (the header included on stream 0) */
  uint8_t header[TCP_SLOT_HEADER_BYTES];
  int64_t trickleFromNs; /* receiver, straggler report on: when the part's first bytes came */
  /* dialing (sender, before the connection is handed to the progress thread) */
  enum tcpDialState dial;
  size_t dialDone;
  uint8_t dialBuf[TCP_HELLO_BYTES];
  uint8_t serverNonce[TCP_NONCE_BYTES], clientNonce[TCP_NONCE_BYTES];
};

struct tcpRecord {
  uint8_t buf[TCP_RECORD_HEAD_BYTES + TCP_NOTE_BYTES];
  size_t len;   /* bytes to move: 0 before any, the head until it is parsed, then all */
  size_t done;  /* bytes moved */
  int complete; /* received: the whole record is in */
};

struct tcpState;

/* One direction of a connection. The FIFO works like shm's: `posted` is written only by the
 * producer (the calling thread of a sender, the progress thread of a receiver) and `freed`
 * only by the consumer; each side caches the other's counter. */
struct tcpConn {
  struct tcpState *s;
  int closeAbortive; /* its streams close with a reset (weftSocketCloseAbortive) */
  struct tcpConn *next; /* in s->conns, under s->lock, from registration on */
  int dir, peer;
  uint64_t connId;
  struct tcpShape shape;
  char *slots;                   /* nslots * slotBytes */
  size_t slotsMapBytes;          /* of the mapping holding slots */
  uint64_t sizes[TCP_MAX_SLOTS]; /* bytes of each posted slot, written before `posted` */
  union weftSockAddr peerAddr;
  char peerName[WEFT_SOCK_NAME_MAX];
  char peerHost[TCP_HOST_BYTES]; /* the peer's hostname (init's peer table), for messages */
  struct tcpStream streams[TCP_MAX_SOCKS];

  _Alignas(64) _Atomic uint64_t posted;
  _Alignas(64) _Atomic uint64_t freed;
  _Atomic int starved;       /* receiver: a stream waits for a free slot (recvDone must wake) */
  _Atomic int failed;        /* set once, after error[] and failRc are written */
  char error[TCP_ERROR_BYTES];
  int failRc; /* the code the caller returns: weftRemoteError, or the peer's close reason */

  /* calling thread only */
  _Alignas(64) uint64_t mine, theirs;
  int dialing;    /* sender: connect() has started the streams */
  int registered; /* in s->conns (set under s->lock) */

  /* under s->lock: the progress thread, or a calling thread's inline pass */
  uint64_t seenPosted, seenFreed, published, headers;
  uint32_t attached; /* receiver: streams authenticated and attached */
  int closing;       /* sender: closed by the caller, still flushing */
  int stopped;       /* failed: no more I/O */
  int inlineOnly;    /* a calling thread's pass: small slots only */
  int64_t lingerUntilMs;
  struct tcpRecord txRecord; /* ours, at close: a sender's goes after its last slot */
  struct tcpRecord rxRecord; /* the peer's, as it arrives */
};

struct tcpPending {
  int fd;
  int pollIdx;
  int64_t deadlineMs;
  size_t helloLen;
  uint8_t nonce[TCP_NONCE_BYTES];
  uint8_t hello[TCP_HELLO_BYTES];
  union weftSockAddr from;
  char name[WEFT_SOCK_NAME_MAX];
};

/* Per-communicator state. Everything below `lock` is shared with the progress thread and
 * touched only under it, except the atomics. */
struct tcpState {
  int rank;
  struct weftComm *comm; /* outlives this state: for the peers' hostnames and close causes */
  struct tcpShape shape;
  size_t sockBufBytes;
  int64_t spinUs, lingerMs;
  struct weftLinkCaps caps;
  uint8_t secret[TCP_SECRET_BYTES];
  union weftSockAddr bindAddr; /* the interface this rank's listener binds */
  uint64_t nextConnId;

  pthread_mutex_t lock;
  pthread_t thread;
  int started;
  int wakeFd; /* eventfd: a caller writes it only when `sleeping` was set */
  _Atomic int sleeping;
  int stop;
  int64_t stopUntilMs;
  int listenFd;
  union weftSockAddr listenAddr;
  char listenName[WEFT_SOCK_NAME_MAX];
  int64_t acceptPauseUntilMs;
  uint64_t generation; /* bumped whenever a descriptor the thread polls may have changed */
  struct tcpConn *conns;
  struct tcpPending *pending;
  size_t npending, pendingCap;
  struct pollfd *fds;
  size_t fdsCap;
};

/* The functions below are shared by the files of this folder only: kept out of the shared
 * library's exported symbols. */
#pragma GCC visibility push(hidden)

/* ---- tcp_wire.c: bytes on the wire, MACs, blobs, socket options ---- */
void weftTcpEncodeBlob(const struct tcpBlob *b, void *out);
/* 0, or -1 when the bytes are not a blob of this version. */
int weftTcpDecodeBlob(const void *in, struct tcpBlob *b);
void weftTcpBuildHello(uint8_t out[TCP_HELLO_BYTES], const uint8_t *secret,
                       const uint8_t *serverNonce, const struct tcpHello *h);
/* NULL and *h filled, or why the hello is refused. */
const char *weftTcpOpenHello(const uint8_t hello[TCP_HELLO_BYTES], const uint8_t *secret,
                             const uint8_t *serverNonce, struct tcpHello *h);
/* The listener's acknowledgement of stream `stream` of connection connId (the dialer compares
 * it with weftBootstrapMacEqual). */
void weftTcpAckMac(uint8_t ack[TCP_ACK_BYTES], const uint8_t *secret, const uint8_t *clientNonce,
                   const uint8_t *serverNonce, uint64_t connId, uint32_t stream);
/* Where part `stream` of a slot of `bytes` starts and how long it is (0: the stream skips it). */
void weftTcpPart(const struct tcpShape *shape, size_t bytes, uint32_t stream, size_t *off,
                 size_t *len);
weftResult_t weftTcpRandom(void *buf, size_t len);
/* Fills r with a close record (the note cut to TCP_NOTE_BYTES, made printable). */
void weftTcpRecordEncode(struct tcpRecord *r, uint32_t reason, const char *note);
/* A record's 12-byte head: 0 with the reason and note length, -1 when it is not a record. */
int weftTcpParseRecordHead(const uint8_t *head, uint32_t *reason, size_t *noteLen);
/* A complete record's note, NUL-terminated into out, non-printable bytes replaced; returns
 * the reason as the code a peer's close stands for (weftInvalidUsage, weftTimeout, else
 * weftRemoteError). */
weftResult_t weftTcpRecordNote(const struct tcpRecord *r, char *out, size_t len);
/* Large buffers (0: leave autotuning), best effort. */
void weftTcpSetBuffers(int fd, size_t bytes);
int weftTcpSameShape(const struct tcpShape *a, const struct tcpShape *b);

/* ---- tcp_dial.c: a sender's handshakes, on the calling thread ---- */
/* Starts connecting every stream to tc->peerAddr. */
weftResult_t weftTcpDialStart(struct tcpConn *tc);
/* Advances every stream's handshake without waiting; *done once all are authenticated. */
weftResult_t weftTcpDialProgress(struct tcpConn *tc, int *done);

/* ---- tcp_io.c: one pass of I/O over a connection's streams (under s->lock) ---- */
/* 1 if any byte or slot moved. */
int weftTcpSendProgress(struct tcpConn *tc);
int weftTcpRecvProgress(struct tcpConn *tc);
/* Moves what is left of a close record without waiting: 0 (maybe partial; r->complete once
 * received whole), TCP_RECORD_BAD (receiving bytes that are not one), or a socket status. */
int weftTcpRecordSend(int fd, struct tcpRecord *r);
int weftTcpRecordRecv(int fd, struct tcpRecord *r);
static inline int weftTcpRecordPending(const struct tcpRecord *r) { return r->done < r->len; }
/* Whether receiving stream i may read now (its slot is free, its size known). */
int weftTcpRecvCanWork(struct tcpConn *tc, uint32_t i);
/* The poll() events stream i waits for, and what to do with those that came. */
short weftTcpStreamEvents(struct tcpConn *tc, uint32_t i);
void weftTcpStreamEvent(struct tcpConn *tc, uint32_t i, short revents);
/* Calling thread, after posting a small slot behind an empty FIFO: sends it now if the
 * progress thread is not busy (one thread wakeup less per message), else wakes it. */
void weftTcpSendInline(struct tcpConn *tc);
/* Calling thread, finding the FIFO empty: reads small slots itself if the progress thread is
 * not busy, so a small message needs no thread wakeup on either end. */
void weftTcpRecvInline(struct tcpConn *tc);

/* ---- tcp_progress.c: the progress thread ---- */
/* Starts it (once, at the first setup), and joins it after it has flushed closing senders. */
weftResult_t weftTcpStart(struct tcpState *s);
void weftTcpStop(struct tcpState *s);
/* Wakes it if it sleeps (called after publishing a counter). */
void weftTcpWake(struct tcpState *s);
/* Wakes it unconditionally (after changing what it must poll). */
void weftTcpKick(struct tcpState *s);
/* Under s->lock: takes a connection out of s->conns (and frees it). */
void weftTcpUnlinkLocked(struct tcpState *s, struct tcpConn *tc);
void weftTcpFreeConnLocked(struct tcpState *s, struct tcpConn *tc);

/* ---- tcp_listen.c: the listener and the accepting side of the handshake (under s->lock) ---- */
/* Opens the listener if it is closed. */
weftResult_t weftTcpListenLocked(struct tcpState *s);
/* Closes it, with every handshake in progress, once no receiver waits for a stream. */
void weftTcpMaybeUnlistenLocked(struct tcpState *s);
void weftTcpCloseListener(struct tcpState *s);
void weftTcpAccept(struct tcpState *s);
/* Handshake i's socket is readable: read its hello; attach it or drop it. */
void weftTcpPendingEvent(struct tcpState *s, size_t i);
/* Drops handshakes past their deadline (silent peers). */
void weftTcpPendingExpire(struct tcpState *s, int64_t now);
void weftTcpPendingClear(struct tcpState *s, const char *why);
/* The earliest handshake deadline, or deadlineMs if later. */
int64_t weftTcpPendingEarliest(const struct tcpState *s, int64_t deadlineMs);

/* ---- tcp.c ---- */
/* Closes a connection's sockets and frees it (never registered, or unlinked). */
void weftTcpFreeConn(struct tcpConn *tc);

#pragma GCC visibility pop

#endif
