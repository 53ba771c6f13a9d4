/* Emulated hosts for tests: network namespaces made by tests/mpi/cluster.sh (a veth "eth0" in
 * each, on a bridge in this namespace, each host with its own address), and rank processes
 * forked into them, each also in its own UTS namespace whose hostname is the namespace's name,
 * so weft sees as many hosts as namespaces and their ranks talk over TCP on eth0. Root only:
 * without it (or without `ip netns`), netnsClusterUp says why, for the caller to skip. */
#ifndef WEFT_TEST_NETNS_H_
#define WEFT_TEST_NETNS_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "weft.h"

#define NETNS_MAX_HOSTS 8
#define NETNS_MAX_RANKS 16
#define NETNS_NAME_MAX 32

struct netnsCluster {
  char prefix[16];                             /* cluster.sh --prefix: wft<owner pid> */
  int hosts;
  char bridge[NETNS_NAME_MAX];                 /* the root namespace's side: PREFIX-br */
  char ns[NETNS_MAX_HOSTS][NETNS_NAME_MAX];    /* host i's namespace, also its hostname */
  char addr[NETNS_MAX_HOSTS][NETNS_NAME_MAX];  /* host i's address on eth0 */
  int up;
};

/* netnsClusterUp's outcomes besides 0 (up): like cluster.sh, 77 means "cannot be done here". */
#define NETNS_SKIP 77
#define NETNS_ERROR 1

/* Removes stale clusters of crashed runs (cluster.sh clean), then makes `hosts` hosts owned by
 * this process. 0, NETNS_SKIP or NETNS_ERROR with the reason in why. */
int netnsClusterUp(struct netnsCluster *c, int hosts, char *why, size_t len);
/* cluster.sh down (idempotent; a no-op when not up). Returns the namespaces and links named
 * PREFIX-* still present afterwards (0 when clean), or -1 if `ip` could not be run. */
int netnsClusterDown(struct netnsCluster *c);
/* Namespaces and links whose name starts with prefix followed by '-'; -1 if `ip` fails. */
int netnsLeftovers(const char *prefix);

/* In a freshly forked (single-threaded) child: joins namespace ns, a new UTS namespace with
 * hostname ns, and sets WEFT_SOCKET_IFNAME=eth0. 0, or -1 with the reason in why. */
int netnsEnter(const char *ns, char *why, size_t len);

/* Body of a rank process (after netnsEnter and receiving the id); its return value becomes
 * the process's exit status. */
typedef int (*netnsRankFn)(int rank, int nranks, weftUniqueId id, void *arg);

struct netnsJob {
  int nranks, ranksPerHost;
  pid_t pids[NETNS_MAX_RANKS];
  pid_t rootPid; /* the process holding the bootstrap root */
  int64_t idSentMs; /* CLOCK_MONOTONIC ms when the last rank was handed the id */
};

/* Forks c->hosts * ranksPerHost rank processes, rank r on host r / ranksPerHost, each dying
 * with this process (PR_SET_PDEATHSIG). Each enters its namespace and waits for the unique id,
 * which a further child process makes once they are all in (its bootstrap root listens on the
 * bridge, reachable from every host) and this one hands over. 0, or -1 with why (processes
 * already started are killed and reaped). The caller never runs weft code itself. */
int netnsStartRanks(struct netnsJob *job, const struct netnsCluster *c, int ranksPerHost,
                    netnsRankFn fn, void *arg, char *why, size_t len);
/* SIGKILLs every rank of the job still running and reaps them all. */
void netnsReapRanks(struct netnsJob *job);

/* CLOCK_MONOTONIC in ms: the same clock in every namespace, so a rank's timestamps compare
 * with the parent's. */
int64_t netnsNowMs(void);

/* Sockets in TIME_WAIT in this process's network namespace (/proc/net/tcp and tcp6). */
int netnsCountTimeWait(void);
/* Brings up lo in this (fresh) network namespace; 0, or -1 with the reason in why. */
int netnsLoopbackUp(char *why, size_t len);

#endif
