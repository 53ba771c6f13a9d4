#include "socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* ---- Interface name specs (NCCL syntax) ---- */

/* Whether ifname is one of the comma-separated entries of list: equal to it (exact) or
 * starting with it. Empty entries never match. */
static int ifnameListed(const char *list, const char *ifname, int exact) {
  size_t nameLen = strlen(ifname);
  for (const char *entry = list; *entry != '\0';) {
    const char *comma = strchr(entry, ',');
    size_t entryLen = comma ? (size_t)(comma - entry) : strlen(entry);
    if (entryLen > 0 && strncmp(ifname, entry, entryLen) == 0 && (!exact || entryLen == nameLen))
      return 1;
    if (comma == NULL) break;
    entry = comma + 1;
  }
  return 0;
}

int weftIfnameMatches(const char *spec, const char *ifname) {
  if (spec == NULL || *spec == '\0') return 1;
  int exclude = spec[0] == '^';
  if (exclude) spec++;
  int exact = spec[0] == '=';
  if (exact) spec++;
  int listed = ifnameListed(spec, ifname, exact);
  return exclude ? !listed : listed;
}

/* ---- Addresses ---- */

socklen_t weftSockAddrLen(const union weftSockAddr *addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char *weftSockAddrName(const union weftSockAddr *addr, char name[WEFT_SOCK_NAME_MAX]) {
  char ip[INET6_ADDRSTRLEN] = "?", port[8] = "";
  unsigned p = 0;
  if (addr->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->sin.sin_addr, ip, sizeof ip);
    p = ntohs(addr->sin.sin_port);
  } else if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, ip, sizeof ip);
    p = ntohs(addr->sin6.sin6_port);
  } else {
    snprintf(name, WEFT_SOCK_NAME_MAX, "(no address)");
    return name;
  }
  if (p != 0) snprintf(port, sizeof port, ":%u", p);
  if (addr->sa.sa_family == AF_INET)
    snprintf(name, WEFT_SOCK_NAME_MAX, "%s%s", ip, port);
  else if (addr->sin6.sin6_scope_id != 0)
    snprintf(name, WEFT_SOCK_NAME_MAX, "[%s%%%u]%s", ip, (unsigned)addr->sin6.sin6_scope_id, port);
  else
    snprintf(name, WEFT_SOCK_NAME_MAX, "[%s]%s", ip, port);
  return name;
}

const char *weftSockStatusText(int status, char *buf, size_t len) {
  if (status == WEFT_SOCK_CLOSED) return "the peer closed the connection";
  if (status == WEFT_SOCK_TIMEOUT) return "timed out";
  return strerror_r(status, buf, len);
}

/* Splits "host:port" / "[v6]:port" into host (brackets removed) and the port text. */
static int splitHostPort(const char *text, char *host, size_t hostLen, const char **port) {
  const char *colon;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (close == NULL || close[1] != ':') return -1;
    if ((size_t)(close - text - 1) >= hostLen) return -1;
    memcpy(host, text + 1, (size_t)(close - text - 1));
    host[close - text - 1] = '\0';
    colon = close + 1;
  } else {
    colon = strrchr(text, ':');
    /* A second colon means an IPv6 literal without the brackets that delimit its port. */
    if (colon == NULL || memchr(text, ':', (size_t)(colon - text)) != NULL) return -1;
    if ((size_t)(colon - text) >= hostLen || colon == text) return -1;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
  }
  *port = colon + 1;
  return 0;
}

static int parsePort(const char *text, uint16_t *port) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 1 || value > 65535) return -1;
  *port = (uint16_t)value;
  return 0;
}

int weftSocketParseHostPort(const char *text, char *host, size_t hostLen, uint16_t *port) {
  const char *portText = NULL;
  if (text == NULL || splitHostPort(text, host, hostLen, &portText) != 0) return -1;
  return parsePort(portText, port);
}

weftResult_t weftSockAddrParse(const char *what, const char *text, int family,
                               union weftSockAddr *out) {
  char host[256];
  uint16_t port = 0;
  if (weftSocketParseHostPort(text, host, sizeof host, &port) != 0)
    return weftSetError(weftInvalidArgument,
                        "%s=\"%s\" is not host:port or [ipv6]:port with a port in 1..65535", what,
                        text);
  struct addrinfo hints = {.ai_family = family, .ai_socktype = SOCK_STREAM};
  struct addrinfo *found = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &found);
  if (rc != 0)
    return weftSetError(weftInvalidArgument, "%s=\"%s\": cannot resolve \"%s\": %s", what, text,
                        host, gai_strerror(rc));
  memset(out, 0, sizeof *out);
  memcpy(out, found->ai_addr, found->ai_addrlen < sizeof *out ? found->ai_addrlen : sizeof *out);
  freeaddrinfo(found);
  if (out->sa.sa_family == AF_INET)
    out->sin.sin_port = htons(port);
  else
    out->sin6.sin6_port = htons(port);
  return weftSuccess;
}

/* ---- Interface selection ---- */

/* AF_INET, AF_INET6, AF_UNSPEC for empty text, -1 for anything else. */
static int parseFamily(const char *text) {
  if (*text == '\0') return AF_UNSPEC;
  if (strcmp(text, "AF_INET") == 0) return AF_INET;
  if (strcmp(text, "AF_INET6") == 0) return AF_INET6;
  return -1;
}

int weftSocketCheckFamily(const char *value, char *allowed, size_t len) {
  snprintf(allowed, len, "AF_INET or AF_INET6");
  return value == NULL || parseFamily(value) > 0 ? 0 : -1;
}

int weftSocketCheckHostPort(const char *value, char *allowed, size_t len) {
  snprintf(allowed, len, "host:port or [IPv6 address]:port, the port in 1..65535");
  char host[256];
  uint16_t port;
  return value == NULL || (weftSocketParseHostPort(value, host, sizeof host, &port) == 0 && port != 0)
             ? 0 : -1;
}

/* lib/settings.c refused any other text before a socket is made. */
int weftSocketFamily(void) {
  int family = parseFamily(weftParamSocketFamily());
  return family < 0 ? AF_UNSPEC : family;
}

/* An interface address bootstrap sockets can bind: up, of the family, and not IPv6
 * link-local (which would need a scope carried everywhere it is used). */
static int ifaceUsable(const struct ifaddrs *ifa, int family) {
  if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != family) return 0;
  if ((ifa->ifa_flags & IFF_UP) == 0) return 0;
  if (family == AF_INET6 &&
      IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)(const void *)ifa->ifa_addr)->sin6_addr))
    return 0;
  return 1;
}

static void copyIface(const struct ifaddrs *ifa, union weftSockAddr *addr, char *ifname,
                      size_t ifnameLen) {
  memset(addr, 0, sizeof *addr);
  memcpy(addr, ifa->ifa_addr,
         ifa->ifa_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in));
  if (ifname != NULL && ifnameLen > 0) snprintf(ifname, ifnameLen, "%s", ifa->ifa_name);
}

/* First usable interface of family matching spec; loopback: 1 only loopback, 0 no loopback,
 * -1 either. */
static const struct ifaddrs *findIface(const struct ifaddrs *list, int family, const char *spec,
                                       int loopback) {
  for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    if (!ifaceUsable(ifa, family) || !weftIfnameMatches(spec, ifa->ifa_name)) continue;
    int isLoopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    if (loopback >= 0 && isLoopback != loopback) continue;
    return ifa;
  }
  return NULL;
}

/* The families to try, in order of preference. */
static int familiesFor(int family, int families[2]) {
  if (family != AF_UNSPEC) {
    families[0] = family;
    return 1;
  }
  families[0] = AF_INET;
  families[1] = AF_INET6;
  return 2;
}

static const struct ifaddrs *pickIface(const struct ifaddrs *list, int family, const char *spec) {
  int families[2];
  int nfamilies = familiesFor(family, families);
  if (*spec != '\0') {
    for (int i = 0; i < nfamilies; i++) {
      const struct ifaddrs *ifa = findIface(list, families[i], spec, -1);
      if (ifa != NULL) return ifa;
    }
    return NULL;
  }
  /* Default: a real network interface of any family beats loopback of the preferred one. */
  for (int i = 0; i < nfamilies; i++) {
    const struct ifaddrs *ifa = findIface(list, families[i], "^docker,lo", 0);
    if (ifa != NULL) return ifa;
  }
  for (int i = 0; i < nfamilies; i++) {
    const struct ifaddrs *ifa = findIface(list, families[i], "", 1);
    if (ifa != NULL) return ifa;
  }
  return NULL;
}

int weftSocketAddrOfInterface(const char *ifname, int family, union weftSockAddr *addr) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return -1;
  char spec[80];
  snprintf(spec, sizeof spec, "=%s", ifname);
  const struct ifaddrs *ifa = findIface(list, family, spec, -1);
  if (ifa != NULL) copyIface(ifa, addr, NULL, 0);
  freeifaddrs(list);
  return ifa != NULL ? 0 : -1;
}

/* Whether ifa carries addr's address (ports aside). */
static int holdsAddress(const struct ifaddrs *ifa, const union weftSockAddr *addr) {
  if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != addr->sa.sa_family) return 0;
  if (addr->sa.sa_family == AF_INET)
    return ((const struct sockaddr_in *)(const void *)ifa->ifa_addr)->sin_addr.s_addr ==
           addr->sin.sin_addr.s_addr;
  if (addr->sa.sa_family == AF_INET6)
    return memcmp(&((const struct sockaddr_in6 *)(const void *)ifa->ifa_addr)->sin6_addr,
                  &addr->sin6.sin6_addr, sizeof addr->sin6.sin6_addr) == 0;
  return 0;
}

int weftSocketInterfaceOf(const union weftSockAddr *addr, char *ifname, size_t len) {
  struct ifaddrs *list = NULL;
  if (len == 0 || getifaddrs(&list) != 0) return -1;
  int found = -1;
  for (const struct ifaddrs *ifa = list; ifa != NULL && found != 0; ifa = ifa->ifa_next)
    if (holdsAddress(ifa, addr)) found = 0, snprintf(ifname, len, "%s", ifa->ifa_name);
  freeifaddrs(list);
  return found;
}

static const char *familyName(int family) {
  return family == AF_INET ? "AF_INET" : family == AF_INET6 ? "AF_INET6" : "any family";
}

weftResult_t weftSocketPickInterface(int family, union weftSockAddr *addr, char *ifname,
                                     size_t ifnameLen) {
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return weftSetSysError(errno, "getifaddrs failed");
  const char *spec = weftParamSocketIfname();
  const struct ifaddrs *ifa = pickIface(list, family, spec);
  if (ifa == NULL) {
    freeifaddrs(list);
    if (*spec != '\0')
      return weftSetError(weftInvalidArgument,
                          "WEFT_SOCKET_IFNAME=\"%s\" matches no interface that is up with an "
                          "address of %s",
                          spec, familyName(family));
    return weftSetError(weftSystemError, "no interface is up with an address of %s",
                        familyName(family));
  }
  copyIface(ifa, addr, ifname, ifnameLen);
  freeifaddrs(list);
  return weftSuccess;
}

static int sameSubnet(const struct sockaddr *local, const struct sockaddr *mask,
                      const union weftSockAddr *remote) {
  if (mask == NULL || local->sa_family != remote->sa.sa_family) return 0;
  const uint8_t *a, *m, *r;
  size_t len;
  if (local->sa_family == AF_INET) {
    a = (const uint8_t *)&((const struct sockaddr_in *)(const void *)local)->sin_addr;
    m = (const uint8_t *)&((const struct sockaddr_in *)(const void *)mask)->sin_addr;
    r = (const uint8_t *)&remote->sin.sin_addr;
    len = 4;
  } else {
    a = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)local)->sin6_addr;
    m = (const uint8_t *)&((const struct sockaddr_in6 *)(const void *)mask)->sin6_addr;
    r = (const uint8_t *)&remote->sin6.sin6_addr;
    len = 16;
  }
  for (size_t i = 0; i < len; i++)
    if (((a[i] ^ r[i]) & m[i]) != 0) return 0;
  return 1;
}

weftResult_t weftSocketPickInterfaceToward(const union weftSockAddr *remote,
                                           union weftSockAddr *addr, char *ifname,
                                           size_t ifnameLen) {
  int family = remote->sa.sa_family;
  if (*weftParamSocketIfname() != '\0')
    return weftSocketPickInterface(family, addr, ifname, ifnameLen);
  struct ifaddrs *list = NULL;
  if (getifaddrs(&list) != 0) return weftSetSysError(errno, "getifaddrs failed");
  for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
    if (ifaceUsable(ifa, family) && sameSubnet(ifa->ifa_addr, ifa->ifa_netmask, remote)) {
      copyIface(ifa, addr, ifname, ifnameLen);
      freeifaddrs(list);
      return weftSuccess;
    }
  }
  freeifaddrs(list);
  return weftSocketPickInterface(family, addr, ifname, ifnameLen);
}

/* ---- Connections ---- */

void weftSocketClose(int *fd) {
  if (*fd >= 0) close(*fd); /* never retried on EINTR: Linux has released the fd already */
  *fd = -1;
}

/* Whether the peer has closed its end (its FIN arrived): it reads nothing more. */
static int peerClosed(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLRDHUP};
  return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP)) != 0;
}

void weftSocketCloseAbortive(int *fd, int peerHasAll) {
  if (*fd < 0) return;
  /* A reset drops what the peer's kernel has not acknowledged (what it holds stays readable
   * before the reset is reported, on Linux): reset when nothing is unacknowledged, when the
   * peer has closed, or when the caller knows the peer has read all it needs. Otherwise a
   * plain close; the peer's reset then still spares both sides TIME_WAIT. */
  int unacked = -1;
  int reset = peerHasAll || (ioctl(*fd, SIOCOUTQ, &unacked) == 0 && unacked == 0) || peerClosed(*fd);
  if (reset) {
    struct linger now = {.l_onoff = 1, .l_linger = 0};
    (void)setsockopt(*fd, SOL_SOCKET, SO_LINGER, &now, sizeof now); /* failing: a plain close */
  }
  weftSocketClose(fd);
}

static void setNoDelay(int fd) {
  int one = 1;
  /* Bootstrap messages are small and latency-bound; Nagle would only delay them. */
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    INFO(WEFT_BOOT, "TCP_NODELAY not set on fd %d: %s", fd, strerror(errno));
}

weftResult_t weftSocketListen(const union weftSockAddr *local, int *fd, union weftSockAddr *bound) {
  char name[WEFT_SOCK_NAME_MAX];
  *fd = socket(local->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0)
    return weftSetSysError(errno, "socket() for a listener on %s", weftSockAddrName(local, name));
  int one = 1;
  /* A fixed port (WEFT_COMM_ID) must be reusable while old connections sit in TIME_WAIT. */
  setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  socklen_t len = weftSockAddrLen(local);
  if (bind(*fd, &local->sa, len) != 0 || listen(*fd, SOMAXCONN) != 0) {
    int err = errno;
    weftSocketClose(fd);
    return weftSetSysError(err, "cannot listen on %s", weftSockAddrName(local, name));
  }
  memset(bound, 0, sizeof *bound);
  len = sizeof *bound;
  if (getsockname(*fd, &bound->sa, &len) != 0) {
    int err = errno;
    weftSocketClose(fd);
    return weftSetSysError(err, "getsockname of the listener on %s", weftSockAddrName(local, name));
  }
  return weftSuccess;
}

int weftSocketAccept(int listenFd, int *fd, union weftSockAddr *peer) {
  socklen_t len = sizeof *peer;
  memset(peer, 0, sizeof *peer);
  int accepted;
  WEFT_SYSCALL_RETRY(accepted, accept4(listenFd, &peer->sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (accepted < 0) {
    *fd = -1;
    return errno == EWOULDBLOCK ? EAGAIN : errno;
  }
  setNoDelay(accepted);
  *fd = accepted;
  return 0;
}

int weftSocketConnectStart(const union weftSockAddr *remote, int *fd) {
  *fd = socket(remote->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return errno;
  setNoDelay(*fd);
  /* EINTR on a nonblocking connect leaves it running in the background, like EINPROGRESS. */
  if (connect(*fd, &remote->sa, weftSockAddrLen(remote)) == 0 || errno == EINPROGRESS ||
      errno == EINTR)
    return 0;
  int err = errno;
  weftSocketClose(fd);
  return err;
}

int weftSocketConnectResult(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

int weftSocketConnect(const union weftSockAddr *remote, int64_t deadlineMs, int *fd) {
  int rc = weftSocketConnectStart(remote, fd);
  if (rc != 0) return rc;
  struct pollfd pfd = {.fd = *fd, .events = POLLOUT};
  int ready = weftPollUntil(&pfd, 1, deadlineMs);
  rc = ready > 0 ? weftSocketConnectResult(*fd) : ready == 0 ? WEFT_SOCK_TIMEOUT : errno;
  if (rc != 0) weftSocketClose(fd);
  return rc;
}

/* ---- Data ---- */

int weftSocketSendSome(int fd, const void *buf, size_t len, size_t *done) {
  while (*done < len) {
    ssize_t n = send(fd, (const char *)buf + *done, len - *done, MSG_NOSIGNAL);
    if (n > 0) {
      *done += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      return (n == 0 || errno == EPIPE || errno == ECONNRESET) ? WEFT_SOCK_CLOSED : errno;
    }
  }
  return 0;
}

int weftSocketRecvSome(int fd, void *buf, size_t len, size_t *done) {
  while (*done < len) {
    ssize_t n = recv(fd, (char *)buf + *done, len - *done, 0);
    if (n > 0) {
      *done += (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      return (n == 0 || errno == ECONNRESET) ? WEFT_SOCK_CLOSED : errno;
    }
  }
  return 0;
}

static int transferAll(int fd, void *buf, size_t len, int64_t deadlineMs, int sending) {
  size_t done = 0;
  for (;;) {
    int rc =
        sending ? weftSocketSendSome(fd, buf, len, &done) : weftSocketRecvSome(fd, buf, len, &done);
    if (rc != 0 || done == len) return rc;
    struct pollfd pfd = {.fd = fd, .events = sending ? POLLOUT : POLLIN};
    int ready = weftPollUntil(&pfd, 1, deadlineMs);
    if (ready == 0) return WEFT_SOCK_TIMEOUT;
    if (ready < 0) return errno;
  }
}

int weftSocketSendAll(int fd, const void *buf, size_t len, int64_t deadlineMs) {
  return transferAll(fd, (void *)(uintptr_t)buf, len, deadlineMs, 1);
}

int weftSocketRecvAll(int fd, void *buf, size_t len, int64_t deadlineMs) {
  return transferAll(fd, buf, len, deadlineMs, 0);
}

int weftPollTimeout(int64_t deadlineMs) {
  int64_t left = deadlineMs - weftNowMs();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

_Thread_local _Atomic int *weftThreadAbortFlag;

/* With an abort flag on this thread (a non-blocking init), polls in slices so that
 * weftCommAbort stops it within WEFT_ABORT_POLL_MS. */
#define WEFT_ABORT_POLL_MS 50
int weftPollUntil(struct pollfd *fds, nfds_t nfds, int64_t deadlineMs) {
  _Atomic int *abortFlag = weftThreadAbortFlag;
  for (;;) {
    if (abortFlag != NULL && atomic_load(abortFlag)) {
      errno = ECANCELED;
      return -1;
    }
    int timeout = weftPollTimeout(deadlineMs);
    int sliced = abortFlag != NULL && timeout > WEFT_ABORT_POLL_MS;
    int ready = poll(fds, nfds, sliced ? WEFT_ABORT_POLL_MS : timeout);
    if (ready == 0 && sliced) continue;
    if (ready >= 0 || errno != EINTR) return ready;
  }
}

void weftSockAddrEncode(uint8_t out[WEFT_SOCK_WIRE_BYTES], const union weftSockAddr *addr) {
  memset(out, 0, WEFT_SOCK_WIRE_BYTES);
  if (addr->sa.sa_family == AF_INET) {
    out[0] = 4;
    memcpy(out + 2, &addr->sin.sin_port, 2); /* already network order */
    memcpy(out + 4, &addr->sin.sin_addr, 4);
  } else if (addr->sa.sa_family == AF_INET6) {
    uint32_t scope = htonl(addr->sin6.sin6_scope_id);
    out[0] = 6;
    memcpy(out + 2, &addr->sin6.sin6_port, 2);
    memcpy(out + 4, &addr->sin6.sin6_addr, 16);
    memcpy(out + 20, &scope, 4);
  }
}

int weftSockAddrDecode(const uint8_t in[WEFT_SOCK_WIRE_BYTES], union weftSockAddr *addr) {
  memset(addr, 0, sizeof *addr);
  if (in[0] == 0) return 0;
  if (in[0] == 4) {
    addr->sin.sin_family = AF_INET;
    memcpy(&addr->sin.sin_port, in + 2, 2);
    memcpy(&addr->sin.sin_addr, in + 4, 4);
  } else if (in[0] == 6) {
    uint32_t scope;
    addr->sin6.sin6_family = AF_INET6;
    memcpy(&addr->sin6.sin6_port, in + 2, 2);
    memcpy(&addr->sin6.sin6_addr, in + 4, 16);
    memcpy(&scope, in + 20, 4);
    addr->sin6.sin6_scope_id = ntohl(scope);
  } else {
    return -1;
  }
  return addr->sin.sin_port != 0 ? 1 : -1;
}
