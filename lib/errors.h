/* What went wrong, in words: the result codes' strings, the error of a wait that saw the
 * abort flag, and where an API call leaves the thread's last error (lib/log.h records it)
 * so that weftGetLastError(comm) finds it. A leaf: it calls nothing above it. */
#ifndef WEFT_ERRORS_H_
#define WEFT_ERRORS_H_

#include "weft.h"

struct weftComm;

/* The error of a wait that saw the abort flag (weftCommAbort): weftRemoteError. */
weftResult_t weftAbortedError(const struct weftComm *comm);
/* Copies this thread's last error into comm (if live) for weftGetLastError(comm); returns rc. */
weftResult_t weftReportTo(struct weftComm *comm, weftResult_t rc);

#endif
