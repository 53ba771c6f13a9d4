/* An accelerator emulated on the CPU (emudev.c), behind lib/device.h's interface, so that the
 * path of calls on device buffers (lib/devcoll.c) runs and is checked where no GPU is.
 *
 * What it keeps of a GPU:
 *  - Device memory the host cannot touch: an allocation is a memfd mapped twice, PROT_NONE at
 *    the address the program gets and read-write at one only the emulator uses, so library
 *    code that reads or writes a device pointer itself crashes the test instead of working by
 *    accident.
 *  - Streams that run their work in order on a thread of their own, later than the call that
 *    enqueued it: a call that waited for its stream, or read its input at enqueue, would be
 *    seen (a test holds a stream with emuStreamHold before the call).
 *  - Events, the stream wait on a flag word, copies in any direction, and the reductions
 *    (lib/reduce.c's, on the emulator's view of the memory).
 * IPC handles work inside one process only (the handle carries the pointer). */
#ifndef WEFT_TEST_EMUDEV_H_
#define WEFT_TEST_EMUDEV_H_

#include <stddef.h>
#include <stdint.h>

#include "device.h"

extern const struct weftDeviceOps emuDevice;

/* Installs the emulator as the library's runtime (weftDeviceSetRuntime). */
void emuInstall(void);
/* Puts a wait in stream's queue until emuStreamRelease(hold): work enqueued after it runs
 * only then. */
struct emuHold;
struct emuHold *emuStreamHold(void *stream);
void emuStreamRelease(struct emuHold *hold);
/* Device allocations still live (leak checks). */
int emuLiveAllocations(void);

#endif
