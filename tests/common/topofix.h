/* The topology fixtures of tests/data (tests/data/make-topo-fixtures.py says what each holds)
 * and places on them, for the topology tests. */
#ifndef WEFT_TEST_TOPOFIX_H_
#define WEFT_TEST_TOPOFIX_H_

#include <criterion/criterion.h>

#include "topo.h"

/* tests/data/name of the source tree: beside the binary's build/tests/<dir>/, else from the
 * current directory. The string lives until 4 more calls. */
const char *topoFixturePath(const char *name);
/* The model of fixture name; fails the test when it cannot be loaded (inline: only Criterion
 * tests include this, and the other users of tests/common link no Criterion). */
static inline struct weftTopoHost *topoFixtureLoad(const char *name) {
  const char *path = topoFixturePath(name);
  struct weftTopoHost *h = NULL;
  weftResult_t rc = weftTopoHostLoad(path, &h);
  cr_assert_eq(rc, weftSuccess, "%s: %s", path, weftGetLastError(NULL));
  return h;
}
/* The place of a rank bound to the PUs of core c (all its hyperthreads). */
void topoPlaceOnCore(const struct weftTopoHost *h, int c, struct weftTopoPlace *p);

#endif
