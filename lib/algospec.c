/* WEFT_ALGO, in NCCL_ALGO's syntax:
 *   ring,tree                          every collective that ring or tree runs may use only
 *                                      those two (the others keep every algorithm)
 *   ^tree                              any algorithm but tree
 *   allreduce:ring,tree;broadcast:^tree  per collective; collectives not named keep the rest
 * Names are case-insensitive; a later entry for a collective replaces an earlier one. A list
 * that names one algorithm forces it. */
#include "algospec.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "collname.h"
#include "core.h"

static int algoIndexN(const char *name, size_t n) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (strlen(weftAlgos[a]->name) == n && strncasecmp(name, weftAlgos[a]->name, n) == 0) return a;
  return -1;
}

static int collIndexN(const char *name, size_t n) {
  for (int c = 0; c < weftNumColls; c++)
    if (strlen(weftCollName((weftColl_t)c)) == n &&
        strncasecmp(name, weftCollName((weftColl_t)c), n) == 0)
      return c;
  return -1;
}

/* The algorithms that run coll. */
static unsigned runners(int coll) {
  unsigned m = 0;
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (weftAlgos[a]->colls & WEFT_COLL_BIT(coll)) m |= 1u << a;
  return m;
}

/* "ring,tree" or "^tree" of n bytes into a mask of algorithms; -1 (why in err) if malformed. */
static int parseList(const char *text, size_t n, unsigned *mask, int *exclude, char *err,
                     size_t len) {
  *exclude = n > 0 && text[0] == '^';
  const char *p = text + *exclude, *end = text + n;
  *mask = 0;
  if (p == end) return snprintf(err, len, "an empty list of algorithms"), -1;
  for (;;) {
    const char *comma = memchr(p, ',', (size_t)(end - p));
    size_t k = comma != NULL ? (size_t)(comma - p) : (size_t)(end - p);
    int a = algoIndexN(p, k);
    if (a < 0) return snprintf(err, len, "\"%.*s\" is not an algorithm", (int)k, p), -1;
    *mask |= 1u << a;
    if (comma == NULL) return 0;
    p = comma + 1;
  }
}

/* Applies one list to collective coll: allowed ones, or all but the excluded. */
static int applyTo(struct weftAlgoSpec *spec, int coll, unsigned mask, int exclude, int strict,
                   char *err, size_t len) {
  unsigned run = runners(coll);
  if (run == 0 && !strict) return 0; /* no algorithm runs it yet: nothing to narrow */
  if (!exclude && strict && (mask & ~run) != 0) {
    int a = __builtin_ctz(mask & ~run);
    return snprintf(err, len, "%s does not run %s", weftAlgos[a]->name,
                    weftCollName((weftColl_t)coll)), -1;
  }
  if (!exclude && (mask & run) == 0) return 0; /* a global list none of whose algorithms run it */
  spec->allowed[coll] = exclude ? run & ~mask : mask & run;
  spec->restricted |= WEFT_COLL_BIT(coll);
  if (spec->allowed[coll] == 0)
    return snprintf(err, len, "it leaves %s no algorithm", weftCollName((weftColl_t)coll)), -1;
  return 0;
}

static int parseEntry(struct weftAlgoSpec *spec, const char *text, size_t n, char *err,
                      size_t len) {
  const char *colon = memchr(text, ':', n);
  int coll = -1;
  if (colon != NULL) {
    coll = collIndexN(text, (size_t)(colon - text));
    if (coll < 0)
      return snprintf(err, len, "\"%.*s\" is not a collective", (int)(colon - text), text), -1;
    n -= (size_t)(colon + 1 - text);
    text = colon + 1;
  }
  unsigned mask;
  int exclude;
  if (parseList(text, n, &mask, &exclude, err, len) != 0) return -1;
  if (coll >= 0) return applyTo(spec, coll, mask, exclude, 1, err, len);
  for (int c = 0; c < weftNumColls; c++)
    if (applyTo(spec, c, mask, exclude, 0, err, len) != 0) return -1;
  return 0;
}

int weftAlgoSpecParse(const char *text, struct weftAlgoSpec *spec, char *err, size_t len) {
  memset(spec, 0, sizeof *spec);
  for (int c = 0; c < weftNumColls; c++) spec->allowed[c] = runners(c);
  err[0] = '\0';
  if (text == NULL || *text == '\0') return 0;
  for (const char *p = text;;) {
    size_t n = strcspn(p, ";");
    if (n == 0) return snprintf(err, len, "an empty entry"), -1;
    if (parseEntry(spec, p, n, err, len) != 0) return -1;
    if (p[n] == '\0') return 0;
    p += n + 1;
  }
}

int weftTuneCheckAlgo(const char *value, char *allowed, size_t len) {
  size_t o = (size_t)snprintf(allowed, len, "a comma list of");
  for (int a = 0; weftAlgos[a] != NULL && o < len; a++)
    o += (size_t)snprintf(allowed + o, len - o, " %s", weftAlgos[a]->name);
  if (o < len)
    o += (size_t)snprintf(allowed + o, len - o, " (^ first: all but those), or per collective "
                          "as allreduce:ring,tree;broadcast:^tree");
  if (value == NULL) return 0;
  struct weftAlgoSpec spec;
  char err[160];
  int rc = weftAlgoSpecParse(value, &spec, err, sizeof err);
  if (rc != 0 && o < len) snprintf(allowed + o, len - o, "; here %s", err);
  return rc;
}
