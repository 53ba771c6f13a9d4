/* What a communicator does when a collective fails: the error becomes sticky, the links
 * close so that peers blocked on them fail in turn, and the error names who is gone. Called
 * by the collective and group entry points (lib/coll.c, lib/group.c) and by shrink. */
#ifndef WEFT_COMMFAIL_H_
#define WEFT_COMMFAIL_H_

#include "weft.h"

struct weftComm;

/* Called by a collective that failed with rc: the communicator becomes unusable (sticky
 * asyncError); on errors other than a timeout its connections are closed so that peers
 * blocked on them fail in turn; a remote error names the ranks that are gone
 * (weftCommNameGone), a timeout the chain of waits the signature notes show. Returns the
 * error, rc or the one that names more. */
weftResult_t weftCommFail(struct weftComm *comm, weftResult_t rc);
/* Closes every link of comm (the algorithms' and the ring's); rc is the reason passed to the
 * transports (weftInvalidUsage reads as a mismatch to shm peers). */
void weftCommCloseLinks(struct weftComm *comm, weftResult_t rc);

#endif
