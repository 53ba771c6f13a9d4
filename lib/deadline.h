/* Clocks and deadlines. Every wait of the library ends at a deadline in CLOCK_MONOTONIC
 * milliseconds (weftNowMs): a communicator's waits at weftDeadline, the bootstrap's and the
 * sockets' at whatever deadline their caller passes down. A leaf: it calls nothing above it. */
#ifndef WEFT_DEADLINE_H_
#define WEFT_DEADLINE_H_

#include <stdint.h>

struct weftComm;

/* CLOCK_MONOTONIC, in ms. */
int64_t weftNowMs(void);
/* CLOCK_MONOTONIC, in ns: for timing waits and transfers (the straggler report). */
int64_t weftNowNs(void);
/* Deadline of a wait on comm that starts now: now + comm->timeoutMs (WEFT_TIMEOUT_MS, or the
 * config's timeout). */
int64_t weftDeadline(const struct weftComm *comm);

#endif
