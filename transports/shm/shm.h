/* Shared-memory transport: internals other code may call (tests and fuzzers). */
#ifndef WEFT_TRANSPORT_SHM_H_
#define WEFT_TRANSPORT_SHM_H_

#include <stdint.h>

#include "shmseg.h"

/* Decodes a receiver's setup blob (WEFT_CONN_BLOB_BYTES from a peer): 0 with the segment name
 * and the FIFO shape, or -1 when the name is not one weftShmCreate makes ("/weft-" and no
 * other '/'), so a peer cannot make this rank map or unlink any other shared object. */
int weftShmParseBlob(const void *blob, char name[WEFT_SHM_NAME_BYTES], uint64_t *slotBytes,
                     uint32_t *nslots);

#endif
