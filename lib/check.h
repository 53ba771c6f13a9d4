/* Error propagation: WEFTCHECK returns the error of a failed call, leaving a file:line
 * breadcrumb at INFO; the place that detected the error already logged it at WARN. */
#ifndef WEFT_CHECK_H_
#define WEFT_CHECK_H_

#include <errno.h>
#include "log.h"

#define WEFTCHECK(call)                                                      \
  do {                                                                       \
    weftResult_t weftRes_ = (call);                                          \
    if (weftRes_ != weftSuccess) {                                           \
      INFO(WEFT_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)weftRes_);      \
      return weftRes_;                                                       \
    }                                                                        \
  } while (0)

#define WEFTCHECKGOTO(call, res, label)                                      \
  do {                                                                       \
    (res) = (call);                                                          \
    if ((res) != weftSuccess) {                                              \
      INFO(WEFT_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res));         \
      goto label;                                                            \
    }                                                                        \
  } while (0)

/* Retries a system call interrupted by a signal. */
#define WEFT_SYSCALL_RETRY(rv, call)                                         \
  do {                                                                       \
    (rv) = (call);                                                           \
  } while ((rv) == -1 && errno == EINTR)

#endif
