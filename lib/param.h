/* Parameters from the environment, read when asked (the communicator caches what it needs at
 * init), so a test may change them between communicators. */
#ifndef WEFT_PARAM_H_
#define WEFT_PARAM_H_

#include <stdint.h>
#include <stdio.h>

#define WEFT_PARAM_INT(name, env, deflt, help) int64_t weftParam##name(void);
#define WEFT_PARAM_STR(name, env, deflt, help) const char *weftParam##name(void);
#include "params.def"
#undef WEFT_PARAM_INT
#undef WEFT_PARAM_STR

/* Parses a decimal integer with an optional binary K/M/G suffix. 0 on success. */
int weftParseInt(const char *text, int64_t *value);
/* Prints every parameter with its default, current value and help (markdown table rows). */
void weftParamsPrint(FILE *out);

#endif
