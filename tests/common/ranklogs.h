/* The ranks' debug logs (WEFT_DEBUG_FILE=/tmp/<base>.%p, one file per process), read after
 * the ranks are gone: what a test expects weft to have said. */
#ifndef WEFT_TEST_RANKLOGS_H_
#define WEFT_TEST_RANKLOGS_H_

#include <stddef.h>

/* Sets WEFT_DEBUG_FILE so that every rank logs into /tmp/<base>.<pid>. */
void rankLogsTo(const char *base);
/* Lines of the logs /tmp/<base>* that hold needle. first (if not NULL): the first of them
 * from needle on; differ (if not NULL): how many of the others differ from it from needle on;
 * remove: delete the logs after reading. -1 where /tmp cannot be read. */
int rankLogLines(const char *base, const char *needle, char *first, size_t firstLen, int *differ,
                 int remove);

#endif
