/* TCP socket helpers shared by the bootstrap and any other TCP user: address formatting and
 * parsing, interface selection (WEFT_SOCKET_IFNAME / WEFT_SOCKET_FAMILY), and nonblocking I/O
 * bounded by CLOCK_MONOTONIC deadlines (weftNowMs). Every socket made here is SOCK_CLOEXEC,
 * nonblocking and TCP_NODELAY; every send uses MSG_NOSIGNAL; every call retries on EINTR. */
#ifndef WEFT_SOCKET_H_
#define WEFT_SOCKET_H_

#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include "deadline.h"
#include "weft.h"

union weftSockAddr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* Room for "a.b.c.d:port" or "[v6%scope]:port" and the NUL. */
#define WEFT_SOCK_NAME_MAX 80

/* Outcomes of the I/O helpers other than 0 (done) and a positive errno value. */
#define WEFT_SOCK_CLOSED (-1)  /* the peer closed the connection (EOF, ECONNRESET, EPIPE) */
#define WEFT_SOCK_TIMEOUT (-2) /* the deadline passed first */

/* The wire form of an address, shared by the bootstrap and the TCP transport: family (0 none,
 * 4 or 6), 1 pad byte, port (network order), 16 address bytes, IPv6 scope id (big-endian). */
#define WEFT_SOCK_WIRE_BYTES 24
void weftSockAddrEncode(uint8_t out[WEFT_SOCK_WIRE_BYTES], const union weftSockAddr *addr);
/* 1: an address, 0: none (family 0), -1: malformed (unknown family or port 0). */
int weftSockAddrDecode(const uint8_t in[WEFT_SOCK_WIRE_BYTES], union weftSockAddr *addr);

socklen_t weftSockAddrLen(const union weftSockAddr *addr);
/* "ip:port" or "[ip6]:port", without ":port" for port 0 (an address not bound to a port
 * yet); returns name. */
const char *weftSockAddrName(const union weftSockAddr *addr, char name[WEFT_SOCK_NAME_MAX]);
/* Words for an I/O helper outcome (WEFT_SOCK_CLOSED, WEFT_SOCK_TIMEOUT or an errno). */
const char *weftSockStatusText(int status, char *buf, size_t len);

/* Parses "host:port" or "[ipv6]:port" (host may be a name, resolved here). family is AF_INET,
 * AF_INET6 or AF_UNSPEC. On failure sets an error that starts with what (e.g. "WEFT_COMM_ID"). */
/* The parsing half of weftSockAddrParse (internal; exposed for tests/fuzz): splits "host:port"
 * or "[ipv6]:port" into host (NUL-terminated, brackets removed) and a port in 1..65535.
 * 0, or -1 when malformed or when host does not fit hostLen. */
int weftSocketParseHostPort(const char *text, char *host, size_t hostLen, uint16_t *port);
/* Checks of WEFT_SOCKET_FAMILY and WEFT_COMM_ID (weftParamCheckFn, param.h). */
int weftSocketCheckFamily(const char *value, char *allowed, size_t len);
int weftSocketCheckHostPort(const char *value, char *allowed, size_t len);
weftResult_t weftSockAddrParse(const char *what, const char *text, int family,
                               union weftSockAddr *out);
/* AF_INET, AF_INET6 or AF_UNSPEC, from WEFT_SOCKET_FAMILY. */
int weftSocketFamily(void);
/* The address of the interface bootstrap sockets should use: WEFT_SOCKET_IFNAME if set, else
 * the first interface that is up and neither loopback nor docker, else loopback. family may be
 * AF_UNSPEC (IPv4 preferred). ifname may be NULL. */
weftResult_t weftSocketPickInterface(int family, union weftSockAddr *addr, char *ifname,
                                     size_t ifnameLen);
/* The local address to reach remote from: WEFT_SOCKET_IFNAME if set, else the interface whose
 * subnet holds remote, else as weftSocketPickInterface; always remote's family. */
/* The name of the interface that holds addr's address, into ifname; 0 found, -1 not. */
int weftSocketInterfaceOf(const union weftSockAddr *addr, char *ifname, size_t len);
/* The address of family of interface ifname (exact name) when it is up; 0 found, -1 not. */
int weftSocketAddrOfInterface(const char *ifname, int family, union weftSockAddr *addr);
weftResult_t weftSocketPickInterfaceToward(const union weftSockAddr *remote,
                                           union weftSockAddr *addr, char *ifname,
                                           size_t ifnameLen);

/* Nonblocking listening socket bound to local (port 0: ephemeral); bound gets the real port. */
weftResult_t weftSocketListen(const union weftSockAddr *local, int *fd, union weftSockAddr *bound);
/* Accepts one pending connection: 0, EAGAIN when none is pending, or another errno. */
int weftSocketAccept(int listenFd, int *fd, union weftSockAddr *peer);
/* Starts a nonblocking connect: 0 (connected or in progress; wait for POLLOUT, then call
 * weftSocketConnectResult) or an errno, in which case *fd is -1. */
int weftSocketConnectStart(const union weftSockAddr *remote, int *fd);
/* The outcome of a connect in progress once poll reports the socket writable: 0 or an errno. */
int weftSocketConnectResult(int fd);
/* Connects before deadlineMs: 0, WEFT_SOCK_TIMEOUT or an errno; *fd is -1 unless 0. */
int weftSocketConnect(const union weftSockAddr *remote, int64_t deadlineMs, int *fd);

/* Move bytes [*done, len) without waiting, advancing *done: 0 (possibly partial), or
 * WEFT_SOCK_CLOSED, or an errno. */
int weftSocketSendSome(int fd, const void *buf, size_t len, size_t *done);
int weftSocketRecvSome(int fd, void *buf, size_t len, size_t *done);
/* All len bytes before deadlineMs: 0, WEFT_SOCK_CLOSED, WEFT_SOCK_TIMEOUT or an errno. */
int weftSocketSendAll(int fd, const void *buf, size_t len, int64_t deadlineMs);
int weftSocketRecvAll(int fd, void *buf, size_t len, int64_t deadlineMs);

/* poll() until deadlineMs, restarting on EINTR with the time left: ready count, 0 at the
 * deadline, or -1 with errno. */
int weftPollUntil(struct pollfd *fds, nfds_t nfds, int64_t deadlineMs);
/* When set (by a non-blocking init thread), weftPollUntil returns -1 with errno ECANCELED
 * soon after *weftThreadAbortFlag becomes nonzero. */
extern _Thread_local _Atomic int *weftThreadAbortFlag;
/* The poll() timeout, in ms, that ends at deadlineMs (0 when past). */
int weftPollTimeout(int64_t deadlineMs);
/* Closes *fd if open and sets it to -1. */
void weftSocketClose(int *fd);
/* Closes with a reset instead of an orderly end, so neither side keeps the connection in
 * TIME_WAIT (60 s, one local port each: a loop of communicators would run out of ports).
 * Only for a connection whose peer needs nothing more from it: a peer reads what its kernel
 * holds, then "connection reset" instead of the end of the stream. Unless peerHasAll (the
 * caller knows the peer has read everything sent), a close while the peer has not
 * acknowledged every byte and has not closed its end is a plain one (a reset would drop the
 * bytes). */
void weftSocketCloseAbortive(int *fd, int peerHasAll);

#endif
