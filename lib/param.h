/* Parameters from the environment, read when asked (the communicator caches what it needs at
 * init), so a test may change them between communicators. Every value is checked before a
 * communicator or a unique id is made (lib/settings.h), so an accessor only meets a value that
 * passed: the declared range for integers, the declared check for text. */
#ifndef WEFT_PARAM_H_
#define WEFT_PARAM_H_

#include <stddef.h>
#include <stdint.h>

/* A check of one parameter's text beyond its type and range: 0 when value is allowed. It
 * always writes what is allowed into allowed (len bytes), and only that when value is NULL. */
typedef int (*weftParamCheckFn)(const char *value, char *allowed, size_t len);

#define WEFT_PARAM_INT(name, env, deflt, min, max, step, check, help) int64_t weftParam##name(void);
#define WEFT_PARAM_STR(name, env, deflt, check, help) const char *weftParam##name(void);
#include "params.def"
#undef WEFT_PARAM_INT
#undef WEFT_PARAM_STR

/* Parses a decimal integer with an optional binary K/M/G suffix. 0 on success. */
int weftParseInt(const char *text, int64_t *value);
/* Parses a finite decimal number (strtod's syntax, no suffix). 0 on success. */
int weftParseNumber(const char *text, double *value);
/* Checks of numbers in text (WEFT_TCP_BW_GBPS and the like): > 0, and >= 0. */
int weftParamCheckPositive(const char *value, char *allowed, size_t len);
int weftParamCheckNonNegative(const char *value, char *allowed, size_t len);
/* The environment's text of a parameter, NULL when unset or empty (which means the default). */
const char *weftParamText(const char *env);

#endif
