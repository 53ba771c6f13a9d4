/* The library's version and what this build holds, for the banner (WEFT_DEBUG=VERSION, INFO)
 * and weft-info. */
#ifndef WEFT_VERSION_H_
#define WEFT_VERSION_H_

#include "weft.h"

#define WEFT_STR_(x) #x
#define WEFT_STR(x) WEFT_STR_(x)
#define WEFT_VERSION_TEXT WEFT_STR(WEFT_MAJOR) "." WEFT_STR(WEFT_MINOR) "." WEFT_STR(WEFT_PATCH)

/* "weft 0.1.0 (git 26e8e5d); transports shm tcp; algorithms ring direct tree hier; reduction
 * kernels avx2; CUDA built, no GPU: ...; verbs not built; UCX not built" (CUDA: "CUDA runtime
 * 13.0 built, 2 GPUs", "CUDA built, no GPU: <why>" or "CUDA not built"). Static storage. Made on
 * the first call, which asks the accelerator runtime for its devices. */
const char *weftVersionBanner(void);
/* The source revision the build was made from ("26e8e5d", "26e8e5d-dirty", "unknown"). */
const char *weftVersionGitRev(void);

#endif
