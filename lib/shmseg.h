/* POSIX shared-memory segments with unguessable names, created mode 0600. The creator unlinks
 * the name as soon as every user has mapped it, so nothing outlives the processes; a process
 * killed before that leaves a name, which the next weft process of the same PID namespace to
 * init, or to see an init fail, removes (the name holds the namespace and the creator's pid). */
#ifndef WEFT_SHMSEG_H_
#define WEFT_SHMSEG_H_

#include <stddef.h>
#include "weft.h"

#define WEFT_SHM_NAME_BYTES 64

weftResult_t weftShmCreate(size_t bytes, char name[WEFT_SHM_NAME_BYTES], void **ptr);
/* The same, calling place(addr, bytes, arg) on the mapping before any page is allocated, so a
 * memory policy it sets (weftTopoBindMemory) decides where every page of the segment goes,
 * whoever touches it first. */
typedef void (*weftShmPlaceFn)(void *addr, size_t bytes, void *arg);
weftResult_t weftShmCreatePlaced(size_t bytes, char name[WEFT_SHM_NAME_BYTES], void **ptr,
                                 weftShmPlaceFn place, void *arg);
/* Maps a peer's segment. A name that no longer exists is weftRemoteError, not a system error:
 * before this rank attached, its creator closed its end (after a failure of its own) or died
 * and a sweep removed it. */
weftResult_t weftShmOpen(const char *name, size_t bytes, void **ptr);
/* Removes the name (ENOENT is not an error: another user may have removed it). */
void weftShmUnlink(const char *name);
void weftShmUnmap(void *ptr, size_t bytes);
/* Unlinks the segments whose creator, a process of this PID namespace, is gone. */
void weftShmSweepDead(void);

#endif
