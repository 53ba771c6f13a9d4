#include "liveness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "core.h"
#include "log.h"
#include "socket.h"

int weftProcessGone(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], stat[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL) return 0;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *end = strrchr(stat, ')');
  if (end == NULL || end[1] != ' ') return 0;
  if (end[2] == 'Z' || end[2] == 'X') return 1;
  /* A killed process closes its descriptors before it becomes a zombie: peers see its
   * connections close while it still looks alive, unless one reads PF_EXITING (0x4) in the
   * flags, the 7th field after the name. */
  unsigned long flags = 0;
  return sscanf(end + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & 0x4) != 0;
}

int weftRankByProcess(const struct weftComm *comm, int r) {
  const struct weftPeerInfo *p = &comm->peers[r], *me = &comm->peers[comm->rank];
  return p->pid > 0 && p->hostHash == me->hostHash;
}

void weftCommMarkGone(struct weftComm *comm, char *gone, int64_t probeMs) {
  for (int r = 0; r < comm->nranks; r++) {
    if (gone[r] || r == comm->rank) continue;
    if (weftRankByProcess(comm, r))
      gone[r] = comm->peers[r].pid != (int)getpid() && weftProcessGone(comm->peers[r].pid);
    else
      gone[r] = !weftBootstrapProbe(comm->boot, r, probeMs);
  }
}

/* "rank 2 (pid 9 on host h)" for gone ranks judged by their process (byProc 1), "rank 5
 * (10.0.0.3:4000)" for those judged by their listener (byProc 0). */
static int describeGone(const struct weftComm *comm, const char *gone, int byProc, char *buf,
                        size_t len) {
  int found = 0;
  size_t o = 0;
  buf[0] = '\0';
  for (int r = 0; r < comm->nranks; r++) {
    if (!gone[r] || weftRankByProcess(comm, r) != byProc || o >= len) continue;
    char where[WEFT_SOCK_NAME_MAX + 96];
    const union weftSockAddr *addr = weftBootstrapPeerAddr(comm->boot, r);
    if (byProc)
      snprintf(where, sizeof where, "pid %d on host %s", comm->peers[r].pid, comm->peers[r].hostname);
    else if (addr != NULL)
      weftSockAddrName(addr, where);
    else
      snprintf(where, sizeof where, "address unknown");
    o += (size_t)snprintf(buf + o, len - o, "%srank %d (%s)", found++ ? ", " : "", r, where);
  }
  return found;
}

weftResult_t weftCommNameGone(struct weftComm *comm, weftResult_t rc) {
  if (comm->peers == NULL || comm->boot == NULL || weftCommAborted(comm)) return rc;
  char *gone = calloc((size_t)comm->nranks, 1);
  if (gone == NULL) return rc;
  weftBootstrapCloseRing(comm->boot);
  int listeners = 0;
  for (int r = 0; r < comm->nranks; r++) listeners += r != comm->rank && !weftRankByProcess(comm, r);
  if (listeners > 0) weftBootstrapSettle();
  weftCommMarkGone(comm, gone, WEFT_GONE_PROBE_MS);
  char dead[512], closed[512], was[1024];
  int nDead = describeGone(comm, gone, 1, dead, sizeof dead);
  int nClosed = describeGone(comm, gone, 0, closed, sizeof closed);
  free(gone);
  if (nDead > 0 && strstr(weftThreadLastError(), dead) != NULL) nDead = 0; /* said already */
  if (nDead == 0 && nClosed == 0) return rc;
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(weftRemoteError, "%s; %s%s%s%s%s", was, nDead ? "dead: " : "", nDead ? dead : "",
                      nDead && nClosed ? "; " : "",
                      nClosed ? "ranks of other hosts whose listener is closed (dead or destroyed): " : "",
                      nClosed ? closed : "");
}
