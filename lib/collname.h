/* The collectives' names, for messages and WEFT_ALGO. A leaf: it calls nothing. */
#ifndef WEFT_COLLNAME_H_
#define WEFT_COLLNAME_H_

#include "weft.h"

/* "AllReduce", "Broadcast", ...; "?" out of range. */
const char *weftCollName(weftColl_t coll);

#endif
