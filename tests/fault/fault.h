/* Fault injection for tests: a wrapper around any transport's ops table (shm, tcp, and any
 * added later) that drops, delays or kills at a chosen step of a link.
 *
 * How it gets in: faultInstall() registers an interposer with the library's test hook
 * (weftTransportInterpose, lib/transport.h). For every link a communicator of this process
 * sets up afterwards, selectTransport asks it; links of the faulty rank (and peer, if one is
 * given) get a copy of their real table in which only sendPost and recvDone are replaced.
 * Every other member, the name included, is the real transport's, and c->state / c->priv stay
 * the real transport's: the wrapper keeps no per-link record (the real table is found from the
 * wrapper table the link points to), so there is nothing to free and nothing to leak. A link
 * set up before faultInstall, or after faultRemove, is not wrapped.
 *
 * A step is one sendPost or one recvDone on a wrapped link: the two calls by which a rank
 * hands a slot to its peer (data) or back to it (room). Steps are counted per process, over
 * every wrapped link, from faultInstall on; steps 1..after run normally, and the fault applies
 * from step after + 1:
 *   kill   the process sends itself SIGKILL instead of doing step after + 1 (a rank dies in
 *          the middle of a collective, with slots half posted);
 *   drop   from step after + 1 on, sendPost is swallowed: the slot is never published, as if
 *          the link silently stopped delivering (count = 0), or only `count` sends are lost
 *          and later ones delivered again (count = 1: one message vanishes). recvDone is
 *          always forwarded (not freeing a slot would make the receiver read it twice);
 *   delay  from step after + 1 on, every step first sleeps `us` microseconds (a slow rank or
 *          link; results must not change).
 *
 * Configuration, from the test (faultInstall with a struct faultSpec) or from the environment
 * (faultInstallFromEnv reads WEFT_FAULT), as colon-separated items, the kind first:
 *   WEFT_FAULT="kill:rank=2:after=37"          rank 2 dies at its 38th step
 *   WEFT_FAULT="drop:rank=1:peer=2:after=100"  rank 1's link to rank 2 goes silent
 *   WEFT_FAULT="drop:rank=0:after=5:count=1"   rank 0 loses its 6th step's send
 *   WEFT_FAULT="delay:us=200"                  every rank delays every step by 200 us
 * Keys: rank (the faulty rank; default every rank), peer (only links to this rank; default
 * all), after (steps before the fault; default 0), count (drop only; 0 = all), us (delay only).
 * Ranks of several communicators in one process share the step counter: tests give the
 * faulty rank a process of its own (the fault tests fork one process per rank). */
#ifndef WEFT_TEST_FAULT_H_
#define WEFT_TEST_FAULT_H_

#include <stddef.h>
#include <stdint.h>

enum faultKind { FAULT_NONE = 0, FAULT_KILL, FAULT_DROP, FAULT_DELAY };

struct faultSpec {
  enum faultKind kind;
  int rank;       /* faulty rank, -1: every rank */
  int peer;       /* only links to this rank, -1: every link */
  uint64_t after; /* steps that run normally */
  uint64_t count; /* drop: sends lost, 0 = every one from then on */
  uint32_t us;    /* delay per step */
  /* Called once, on the first step the fault applies to (before the kill): tests record when
   * the fault happened. May be NULL. */
  void (*onFire)(void *arg);
  void *arg;
};

/* Parses text (the WEFT_FAULT syntax above) into *spec (onFire NULL); returns 0, or -1 with
 * the reason in why. */
int faultParse(const char *text, struct faultSpec *spec, char *why, size_t whyLen);
/* Resets the step counter and wraps every link set up from now on per *spec. */
void faultInstall(const struct faultSpec *spec);
/* faultInstall with WEFT_FAULT and the given onFire (may be NULL): 0 installed, 1 WEFT_FAULT
 * unset, -1 malformed (why says). */
int faultInstallFromEnv(void (*onFire)(void *arg), void *arg, char *why, size_t whyLen);
/* Links set up from now on are not wrapped; links already wrapped stop injecting (they only
 * count steps). */
void faultRemove(void);
/* Steps counted since faultInstall, and steps the fault applied to (killed, dropped or
 * delayed). */
uint64_t faultSteps(void);
uint64_t faultApplied(void);

#endif
