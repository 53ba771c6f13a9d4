/* The fabric description file (docs/scale.md "Describing a fabric"): one directive a line,
 * then `key value` pairs; `#` starts a comment. Every directive and key is checked: an unknown
 * or repeated one, a missing value, a value without its unit or out of range is refused with
 * the file, the line and what was expected. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define MAX_WORDS 16

struct parser {
  const char *file;
  int line;
  char *err;
  size_t errLen;
  unsigned seen; /* directives met, one bit each */
};

static int fail(struct parser *p, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (p->line > 0) snprintf(p->err, p->errLen, "%s:%d: %s", p->file, p->line, msg);
  else snprintf(p->err, p->errLen, "%s: %s", p->file, msg);
  return -1;
}

/* A number followed by one of the units (with its factor to the result's unit). */
struct unit {
  const char *name;
  double factor;
};
static const struct unit bandwidthUnits[] = {{"GB/s", 1}, {"MB/s", 1e-3}, {"TB/s", 1e3},
                                             {"Gbps", 0.125}, {"Gbit/s", 0.125},
                                             {"Tbps", 125}, {NULL, 0}};
static const struct unit latencyUnits[] = {{"us", 1}, {"ns", 1e-3}, {"ms", 1e3}, {NULL, 0}};
static const struct unit noUnit[] = {{"", 1}, {NULL, 0}};
static const struct unit byteUnits[] = {{"", 1}, {"B", 1}, {"KiB", 1024}, {"MiB", 1048576}, {NULL, 0}};

static int number(struct parser *p, const char *key, const char *text, const struct unit *units,
                  const char *example, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (end == text || errno != 0 || !isfinite(v))
    return fail(p, "'%s' needs a value such as %s, not '%s'", key, example, text);
  for (int i = 0; units[i].name != NULL; i++)
    if (strcmp(end, units[i].name) == 0) {
      v *= units[i].factor;
      if (v < lo || v > hi)
        return fail(p, "'%s' %s is out of range (%g to %g%s)", key, text, lo, hi,
                    units == latencyUnits ? " us" : units == bandwidthUnits ? " GB/s" : "");
      *out = v;
      return 0;
    }
  return fail(p, "'%s' needs a value such as %s: '%s' has no unit it knows", key, example, text);
}

static int integer(struct parser *p, const char *key, const char *text, const struct unit *units,
                   double lo, double hi, int64_t *out) {
  double v;
  if (number(p, key, text, units, units == byteUnits ? "131072 or 128KiB" : "8", lo, hi, &v) != 0)
    return -1;
  if (v != floor(v)) return fail(p, "'%s' needs a whole number, not '%s'", key, text);
  *out = (int64_t)v;
  return 0;
}

/* key/value pairs after a directive: each key of `keys` at most once, every one required
 * unless optional. vals[i] is the value of keys[i], NULL if absent. */
static int pairs(struct parser *p, const char *dir, char **w, int nw, const char *const *keys,
                 int nkeys, unsigned optional, const char **vals) {
  for (int i = 0; i < nkeys; i++) vals[i] = NULL;
  if (nw % 2 != 0) return fail(p, "'%s': '%s' has no value", dir, w[nw - 1]);
  for (int i = 0; i < nw; i += 2) {
    int k = 0;
    while (k < nkeys && strcmp(keys[k], w[i]) != 0) k++;
    if (k == nkeys) {
      char known[128] = "";
      for (int j = 0; j < nkeys; j++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", j ? ", " : "", keys[j]);
      return fail(p, "'%s' has no key '%s' (it takes %s)", dir, w[i], known);
    }
    if (vals[k] != NULL) return fail(p, "'%s': '%s' given twice", dir, w[i]);
    vals[k] = w[i + 1];
  }
  for (int k = 0; k < nkeys; k++)
    if (vals[k] == NULL && !(optional & (1u << k)))
      return fail(p, "'%s' needs '%s'", dir, keys[k]);
  return 0;
}

static int oneValue(struct parser *p, const char *dir, int nw) {
  return nw == 1 ? 0 : fail(p, "'%s' takes one value, not %d", dir, nw);
}

static int hostsLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  int64_t v;
  if (oneValue(p, "hosts", nw) || integer(p, "hosts", w[0], noUnit, 1, 1 << 20, &v)) return -1;
  f->hosts = (int)v;
  return 0;
}

static int gpusLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  int64_t v;
  if (oneValue(p, "gpus", nw) || integer(p, "gpus", w[0], noUnit, 1, 1024, &v)) return -1;
  f->gpus = (int)v;
  return 0;
}

static int scaleupLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  static const char *const keys[] = {"bw", "lat"};
  const char *v[2];
  if (pairs(p, "scaleup", w, nw, keys, 2, 0, v)) return -1;
  return number(p, "bw", v[0], bandwidthUnits, "900GB/s", 1e-3, 1e5, &f->suGBs) ||
         number(p, "lat", v[1], latencyUnits, "1.5us", 0, 1e5, &f->suLatUs);
}

/* burst: a token bucket in front of each NIC link (an emulated cluster's tbf shaping: up to
 * that many bytes pass at once after the link was idle, on average the link's bw); absent: 0,
 * a plain link serialising at bw. */
static int nicLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  static const char *const keys[] = {"count", "bw", "lat", "burst"};
  const char *v[4];
  int64_t count, burst = 0;
  if (pairs(p, "nic", w, nw, keys, 4, 1u << 3, v) || integer(p, "count", v[0], noUnit, 1, 64, &count))
    return -1;
  if (v[3] && integer(p, "burst", v[3], byteUnits, 0, 1 << 30, &burst)) return -1;
  f->nics = (int)count;
  f->nicBurstBytes = (double)burst;
  return number(p, "bw", v[1], bandwidthUnits, "400Gbps", 1e-3, 1e5, &f->nicGBs) ||
         number(p, "lat", v[2], latencyUnits, "3us", 0, 1e6, &f->nicLatUs);
}

static int networkLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  static const char *const keys[] = {"hosts_per_leaf", "oversub", "hop"};
  static const char *const kinds[] = {"flat", "leafspine", "rail"};
  if (nw < 1) return fail(p, "'network' needs a kind: flat, leafspine or rail");
  int k = 0;
  while (k < 3 && strcmp(kinds[k], w[0]) != 0) k++;
  if (k == 3) return fail(p, "'network' kind '%s' is not flat, leafspine or rail", w[0]);
  f->net = (enum simNet)k;
  const char *v[3];
  /* flat: one non-blocking switch, so only its hop */
  if (pairs(p, "network", w + 1, nw - 1, keys, 3, k == SIM_NET_FLAT ? 7u : 0u, v)) return -1;
  if (k == SIM_NET_FLAT && (v[0] || v[1]))
    return fail(p, "'network flat' is one non-blocking switch: it takes only 'hop'");
  int64_t hpl = 1;
  f->oversub = 1;
  f->hopUs = 0;
  if (v[0] && integer(p, "hosts_per_leaf", v[0], noUnit, 1, 1 << 20, &hpl)) return -1;
  f->hostsPerLeaf = (int)hpl;
  if (v[1] && number(p, "oversub", v[1], noUnit, "2", 1, 1024, &f->oversub)) return -1;
  return v[2] ? number(p, "hop", v[2], latencyUnits, "0.5us", 0, 1e5, &f->hopUs) : 0;
}

static int rankLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  static const char *const keys[] = {"overhead", "reduce"};
  const char *v[2];
  if (pairs(p, "rank", w, nw, keys, 2, 0, v)) return -1;
  return number(p, "overhead", v[0], latencyUnits, "1us", 0, 1e5, &f->overheadUs) ||
         number(p, "reduce", v[1], bandwidthUnits, "500GB/s", 1e-3, 1e6, &f->reduceGBs);
}

/* local_depth, net_depth: the pieces in flight on a link before its sender waits for the
 * receiver to free a slot (weft: WEFT_SHM_SLOTS; WEFT_TCP_SLOTS on each side). */
static int slotsLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  static const char *const keys[] = {"local", "net", "local_depth", "net_depth"};
  const char *v[4];
  int64_t local, net, localDepth = f->localDepth, netDepth = f->netDepth;
  if (pairs(p, "slots", w, nw, keys, 4, 3u << 2, v) ||
      integer(p, "local", v[0], byteUnits, 4096, 1 << 30, &local) ||
      integer(p, "net", v[1], byteUnits, 4096, 1 << 30, &net) ||
      (v[2] && integer(p, "local_depth", v[2], noUnit, 1, SIM_MAX_DEPTH, &localDepth)) ||
      (v[3] && integer(p, "net_depth", v[3], noUnit, 1, SIM_MAX_DEPTH, &netDepth)))
    return -1;
  f->localSlot = (size_t)local;
  f->netSlot = (size_t)net;
  f->localDepth = (int)localDepth;
  f->netDepth = (int)netDepth;
  return 0;
}

/* cpu cores C copy RATE [pool host|machine] [wake T]: the cores that run ranks and their
 * transports' progress threads, per host (host) or for all hosts together (machine: emulated
 * hosts on one machine); copy is what one core moves through the network transport per side
 * (socket copies, the TCP stack); wake (default 0) what a rank that waited for a piece loses
 * before it runs, where threads outnumber cores and each waits its turn for one. */
static int cpuLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  static const char *const keys[] = {"cores", "copy", "pool", "wake"};
  const char *v[4];
  int64_t cores;
  if (pairs(p, "cpu", w, nw, keys, 4, 1u << 2 | 1u << 3, v) || integer(p, "cores", v[0], noUnit, 1, 4096, &cores) ||
      number(p, "copy", v[1], bandwidthUnits, "2GB/s", 1e-3, 1e5, &f->cpuCopyGBs) ||
      (v[3] != NULL && number(p, "wake", v[3], latencyUnits, "50us", 0, 1e6, &f->cpuWakeUs)))
    return -1;
  if (v[2] != NULL && strcmp(v[2], "host") != 0 && strcmp(v[2], "machine") != 0)
    return fail(p, "'cpu' pool '%s' is not host or machine", v[2]);
  f->cpuCores = (int)cores;
  f->cpuPoolMachine = v[2] != NULL && strcmp(v[2], "machine") == 0;
  return 0;
}

static int nameLine(struct parser *p, struct simFabric *f, char **w, int nw) {
  if (oneValue(p, "name", nw)) return -1;
  if (strlen(w[0]) >= sizeof f->name) return fail(p, "'name' is longer than %zu characters", sizeof f->name - 1);
  snprintf(f->name, sizeof f->name, "%s", w[0]);
  return 0;
}

struct directive {
  const char *name;
  int (*parse)(struct parser *p, struct simFabric *f, char **w, int nw);
  int required;
};
static const struct directive directives[] = {
  {"name", nameLine, 1},     {"hosts", hostsLine, 1},     {"gpus", gpusLine, 1},
  {"scaleup", scaleupLine, 1}, {"nic", nicLine, 1},       {"network", networkLine, 1},
  {"rank", rankLine, 0},     {"slots", slotsLine, 0},     {"cpu", cpuLine, 0},
  {NULL, NULL, 0},
};

static int parseLine(struct parser *p, struct simFabric *f, char *line) {
  char *hash = strchr(line, '#');
  if (hash != NULL) *hash = '\0';
  char *w[MAX_WORDS + 1];
  int nw = 0;
  for (char *tok = strtok(line, " \t\r"); tok != NULL; tok = strtok(NULL, " \t\r")) {
    if (nw == MAX_WORDS + 1) return fail(p, "more than %d words", MAX_WORDS);
    w[nw++] = tok;
  }
  if (nw == 0) return 0;
  for (int d = 0; directives[d].name != NULL; d++) {
    if (strcmp(directives[d].name, w[0]) != 0) continue;
    if (p->seen & (1u << d)) return fail(p, "'%s' given twice", w[0]);
    p->seen |= 1u << d;
    return directives[d].parse(p, f, w + 1, nw - 1);
  }
  return fail(p, "unknown directive '%s' (name, hosts, gpus, scaleup, nic, network, rank, slots, "
              "cpu)",
              w[0]);
}

static int checkWhole(struct parser *p, struct simFabric *f) {
  p->line = 0;
  for (int d = 0; directives[d].name != NULL; d++)
    if (directives[d].required && !(p->seen & (1u << d)))
      return fail(p, "no '%s' line: a fabric needs name, hosts, gpus, scaleup, nic and network",
                  directives[d].name);
  if (f->gpus % f->nics != 0 && f->nics % f->gpus != 0)
    return fail(p, "%d NICs cannot be shared evenly by %d accelerators", f->nics, f->gpus);
  if (f->net == SIM_NET_FLAT) f->hostsPerLeaf = f->hosts;
  if ((int64_t)f->hosts * f->gpus > (1 << 20))
    return fail(p, "%d hosts of %d accelerators: more than 1048576 ranks", f->hosts, f->gpus);
  return 0;
}

int simFabricParse(const char *text, const char *name, struct simFabric *f, char *err,
                   size_t errLen) {
  memset(f, 0, sizeof *f);
  f->overheadUs = 0.5;
  f->reduceGBs = 200;
  f->localSlot = 131072; /* WEFT_SHM_SLOT_BYTES and WEFT_TCP_SLOT_BYTES' defaults */
  f->netSlot = 524288;
  f->localDepth = 8; /* WEFT_SHM_SLOTS */
  f->netDepth = 16;  /* WEFT_TCP_SLOTS, the sender's and the receiver's */
  struct parser p = {name, 0, err, errLen, 0};
  char *copy = strdup(text);
  if (copy == NULL) return fail(&p, "out of memory");
  int rc = 0;
  char *line = copy; /* lines split by hand, so that empty ones count too */
  while (rc == 0 && line != NULL) {
    char *next = strchr(line, '\n');
    if (next != NULL) *next++ = '\0';
    p.line++;
    rc = parseLine(&p, f, line);
    line = next;
  }
  free(copy);
  return rc != 0 ? -1 : checkWhole(&p, f);
}

int simFabricLoad(const char *path, struct simFabric *f, char *err, size_t errLen) {
  FILE *in = fopen(path, "r");
  if (in == NULL) {
    snprintf(err, errLen, "%s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  char *text = NULL;
  size_t len = 0, cap = 0;
  int c;
  while ((c = fgetc(in)) != EOF) {
    if (c == '\0' || len > (1 << 20)) {
      fclose(in);
      free(text);
      snprintf(err, errLen, "%s: not a fabric description (binary, or over 1 MiB)", path);
      return -1;
    }
    if (len + 2 > cap) {
      cap = cap ? cap * 2 : 4096;
      char *grown = realloc(text, cap);
      if (grown == NULL) {
        fclose(in);
        free(text);
        snprintf(err, errLen, "%s: out of memory", path);
        return -1;
      }
      text = grown;
    }
    text[len++] = (char)c;
  }
  fclose(in);
  if (text == NULL) text = calloc(1, 1);
  else text[len] = '\0';
  int rc = text ? simFabricParse(text, path, f, err, errLen) : -1;
  free(text);
  return rc;
}
