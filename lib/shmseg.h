/* POSIX shared-memory segments with unguessable names, created mode 0600. The creator unlinks
 * the name as soon as every user has mapped it, so nothing outlives the processes. */
#ifndef WEFT_SHMSEG_H_
#define WEFT_SHMSEG_H_

#include <stddef.h>
#include "weft.h"

#define WEFT_SHM_NAME_BYTES 48

weftResult_t weftShmCreate(size_t bytes, char name[WEFT_SHM_NAME_BYTES], void **ptr);
weftResult_t weftShmOpen(const char *name, size_t bytes, void **ptr);
/* Removes the name (ENOENT is not an error: another user may have removed it). */
void weftShmUnlink(const char *name);
void weftShmUnmap(void *ptr, size_t bytes);

#endif
