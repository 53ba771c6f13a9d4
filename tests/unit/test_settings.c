/* Settings never fail silently: a WEFT_* value that is not allowed is refused at
 * weftGetUniqueId and at init with weftInvalidArgument and a message naming the variable, the
 * value and what is allowed; a forced algorithm or transport that cannot run says why;
 * WEFT_DEBUG=VERSION/INFO print the banner; docs/env.md is the generated table. Each Criterion
 * test runs in a process of its own, so a test's environment (and the log, which reads its
 * settings once per process) starts fresh. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The registry of this build (lib/transport_registry.c). */
#ifdef WEFT_HAVE_VERBS
#define VERBS_NAME " verbs"
#define VERBS_NOT_ASKED "verbs: not in WEFT_TRANSPORTS=\"shm\"; "
#else
#define VERBS_NAME ""
#define VERBS_NOT_ASKED ""
#endif
#ifdef WEFT_HAVE_UCX
#define TRANSPORT_NAMES "shm" VERBS_NAME " ucx tcp"
#define UCX_NOT_ASKED VERBS_NOT_ASKED "ucx: not in WEFT_TRANSPORTS=\"shm\"; "
#else
#define TRANSPORT_NAMES "shm" VERBS_NAME " tcp"
#define UCX_NOT_ASKED VERBS_NOT_ASKED
#endif

#include "core.h"
#include "forked.h"
#include "harness.h"
#include "settings.h"

/* The message of the last refusal must name the variable and value, and say what is allowed. */
static void expectRefused(weftResult_t rc, const char *env, const char *value, const char *allowed) {
  char named[256];
  snprintf(named, sizeof named, "%s=\"%s\" is not allowed", env, value);
  const char *msg = weftGetLastError(NULL);
  cr_expect_eq(rc, weftInvalidArgument, "%s=%s: rc %d (%s)", env, value, rc, msg);
  cr_expect(strstr(msg, named) != NULL, "message \"%s\" lacks \"%s\"", msg, named);
  cr_expect(strstr(msg, allowed) != NULL, "message \"%s\" lacks \"%s\"", msg, allowed);
}

static const struct {
  const char *env, *value, *allowed;
} badValues[] = {
    {"WEFT_TIMEOUT_MS", "abc", "an integer from 1 to"},
    {"WEFT_TIMEOUT_MS", "30s", "an integer from 1 to"},
    {"WEFT_TIMEOUT_MS", "0", "an integer from 1 to"},
    {"WEFT_TIMEOUT_MS", "-5", "an integer from 1 to"},
    {"WEFT_DEBUG", "bogus", "NONE, VERSION, WARN, INFO or TRACE"},
    {"WEFT_DEBUG_SUBSYS", "FOO", "a comma list of INIT COLL"},
    {"WEFT_DEBUG_SUBSYS", "INIT,,TUNE", "a comma list of"},
    {"WEFT_DEBUG_SUBSYS", "IB", "a comma list of"}, /* no code logs under IB yet */
    {"WEFT_SHM_SLOTS", "lots", "an integer from 2 to 64"},
    {"WEFT_NET_DEVICES", "eth0,,ib0", "a comma list of interface or RDMA device names"},
    {"WEFT_NET_DEVICES", "^", "a comma list of interface or RDMA device names"},
    {"WEFT_SHM_SLOT_BYTES", "5000", "a multiple of 64"},
    {"WEFT_FLIGHT_RECORDER", "2", "0 or 1"},
    {"WEFT_SIMD", "7", "0 (portable)"},
    {"WEFT_ALGO", "bogus", "a comma list of ring direct tree hier"},
    {"WEFT_TRANSPORTS", "shm,ib", "a comma list of " TRANSPORT_NAMES},
    {"WEFT_TRANSPORTS", "^", "a comma list of " TRANSPORT_NAMES},
    {"WEFT_TRANSPORTS", "^bogus", "\"^\" first: all but those"},
    {"WEFT_IB_HCA", "mlx5_0,,mlx5_1", "a comma list of interface or RDMA device names"},
    {"WEFT_IB_HCA", "mlx5 0", "a comma list of interface or RDMA device names"},
    {"WEFT_IB_GID_INDEX", "-2", "an integer from -1 to 1023"},
    {"WEFT_IB_GID_INDEX", "one", "an integer from -1 to 1023"},
    {"WEFT_IB_QPS_PER_CONNECTION", "0", "an integer from 1 to 8"},
    {"WEFT_IB_QPS_PER_CONNECTION", "9", "an integer from 1 to 8"},
    {"WEFT_SOCKET_FAMILY", "inet", "AF_INET or AF_INET6"},
    {"WEFT_COMM_ID", "nohostport", "host:port"},
    {"WEFT_TCP_BW_GBPS", "fast", "a number > 0"},
    {"WEFT_TCP_BW_GBPS", "0", "a number > 0"},
    {"WEFT_TCP_LAT_US", "-1", "a number >= 0"},
};
#define NBAD (sizeof badValues / sizeof badValues[0])

Test(settings, bad_values_refused_at_get_unique_id, .timeout = 60) {
  for (size_t i = 0; i < NBAD; i++) {
    setenv(badValues[i].env, badValues[i].value, 1);
    weftUniqueId id;
    expectRefused(weftGetUniqueId(&id), badValues[i].env, badValues[i].value, badValues[i].allowed);
    unsetenv(badValues[i].env);
  }
}

Test(settings, bad_values_refused_at_init, .timeout = 60) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess, "%s", weftGetLastError(NULL));
  for (size_t i = 0; i < NBAD; i++) {
    setenv(badValues[i].env, badValues[i].value, 1);
    weftComm_t comm = (weftComm_t)0x1;
    expectRefused(weftCommInitRank(&comm, 1, id, 0), badValues[i].env, badValues[i].value,
                  badValues[i].allowed);
    cr_expect_eq(comm, (weftComm_t)0x1, "a refused init wrote *comm");
    unsetenv(badValues[i].env);
  }
}

/* Every value not allowed is listed, not only the first. */
Test(settings, every_bad_value_is_named, .timeout = 30) {
  setenv("WEFT_TIMEOUT_MS", "30s", 1);
  setenv("WEFT_DEBUG", "LOUD", 1);
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftInvalidArgument);
  const char *msg = weftGetLastError(NULL);
  cr_expect(strstr(msg, "WEFT_TIMEOUT_MS=\"30s\"") != NULL, "%s", msg);
  cr_expect(strstr(msg, "WEFT_DEBUG=\"LOUD\"") != NULL, "%s", msg);
}

/* From the declarations: each integer's bounds, step and suffixes, each default allowed. */
Test(settings, every_declared_parameter_is_checked, .timeout = 120) {
  for (int i = 0; i < weftParamTableCount; i++) {
    const struct weftParamInfo *p = &weftParamTable[i];
    char text[64], allowed[256];
    weftParamAllowed(p, allowed, sizeof allowed);
    weftParamDefault(p, text, sizeof text);
    weftUniqueId id;
    if (text[0] != '\0') {
      setenv(p->env, text, 1);
      cr_expect_eq(weftGetUniqueId(&id), weftSuccess, "%s's default %s refused: %s", p->env, text,
                   weftGetLastError(NULL));
    }
    if (!p->isInt) {
      unsetenv(p->env);
      continue;
    }
    const char *junk[] = {"12abc", "1.5", "", " "};
    for (size_t j = 0; j < 2; j++) {
      setenv(p->env, junk[j], 1);
      expectRefused(weftGetUniqueId(&id), p->env, junk[j], allowed);
    }
    /* Just below, just above, and off the step: only those that exist (no overflow). */
    int useful[3] = {p->min > INT64_MIN, p->max < INT64_MAX, p->step > 1 && p->min < p->max};
    int64_t outside[3] = {useful[0] ? p->min - 1 : 0, useful[1] ? p->max + 1 : 0,
                          useful[2] ? p->min + 1 : 0};
    for (int k = 0; k < 3; k++) {
      if (!useful[k]) continue;
      snprintf(text, sizeof text, "%lld", (long long)outside[k]);
      setenv(p->env, text, 1);
      expectRefused(weftGetUniqueId(&id), p->env, text, allowed);
    }
    setenv(p->env, junk[2], 1); /* empty: the default */
    cr_expect_eq(weftGetUniqueId(&id), weftSuccess, "%s empty: %s", p->env, weftGetLastError(NULL));
    unsetenv(p->env);
  }
}

Test(settings, suffixes_and_accessors, .timeout = 30) {
  setenv("WEFT_SHM_SLOT_BYTES", "64K", 1);
  setenv("WEFT_SHM_SLOTS", "16", 1);
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess, "%s", weftGetLastError(NULL));
  cr_expect_eq(weftParamShmSlotBytes(), 65536);
  cr_expect_eq(weftParamShmSlots(), 16);
  unsetenv("WEFT_SHM_SLOTS");
  cr_expect_eq(weftParamShmSlots(), 8);
}

Test(settings, debug_file_that_cannot_be_opened, .timeout = 30) {
  setenv("WEFT_DEBUG", "INFO", 1);
  setenv("WEFT_DEBUG_FILE", "/nonexistent-weft-dir/log.%p", 1);
  weftUniqueId id;
  expectRefused(weftGetUniqueId(&id), "WEFT_DEBUG_FILE", "/nonexistent-weft-dir/log.%p",
                "opening it failed: No such file or directory");
}

Test(settings, destroy_null_is_success, .timeout = 10) {
  cr_expect_eq(weftCommDestroy(NULL), weftSuccess);
  cr_expect_eq(weftCommAbort(NULL), weftSuccess);
}

/* The log of one weftGetUniqueId and a 1-rank init + destroy at a level, read back. */
static char *logAt(const char *level, const char *subsys) {
  static char path[64], text[1 << 16];
  snprintf(path, sizeof path, "/tmp/weft-test-settings-%d.log", (int)getpid());
  setenv("WEFT_DEBUG", level, 1);
  if (subsys != NULL) setenv("WEFT_DEBUG_SUBSYS", subsys, 1);
  setenv("WEFT_DEBUG_FILE", path, 1);
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess, "%s", weftGetLastError(NULL));
  weftComm_t comm;
  cr_assert_eq(weftCommInitRank(&comm, 1, id, 0), weftSuccess, "%s", weftGetLastError(NULL));
  float x = 1;
  cr_assert_eq(weftAllReduce(&x, &x, 1, weftFloat32, weftSum, comm, NULL), weftSuccess);
  cr_assert_eq(weftCommDestroy(comm), weftSuccess);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(path);
  return text;
}

static int countLines(const char *text) {
  int n = 0;
  for (const char *p = text; *p; p++) n += *p == '\n';
  return n;
}

Test(settings, debug_version_prints_the_banner_only, .timeout = 30) {
  const char *log = logAt("VERSION", NULL);
  char want[64];
  snprintf(want, sizeof want, "WEFT weft %d.%d.%d (git ", WEFT_MAJOR, WEFT_MINOR, WEFT_PATCH);
  cr_expect(strstr(log, want) != NULL, "no banner \"%s\" in: %s", want, log);
  cr_expect_eq(countLines(log), 1, "VERSION printed more than the banner: %s", log);
}

Test(settings, debug_info_prints_banner_with_features, .timeout = 30) {
  const char *log = logAt("info", "INIT,COLL");
  char want[64];
  snprintf(want, sizeof want, "WEFT INFO weft %d.%d.%d (git ", WEFT_MAJOR, WEFT_MINOR, WEFT_PATCH);
  const char *banner = strstr(log, want);
  cr_assert(banner != NULL, "no banner \"%s\" in: %s", want, log);
  cr_expect(strstr(banner, "transports " TRANSPORT_NAMES) != NULL, "%s", banner);
  cr_expect(strstr(banner, "CUDA ") != NULL && strstr(banner, "verbs ") != NULL &&
                strstr(banner, "UCX ") != NULL, "%s", banner);
  cr_expect(strstr(banner + 1, want) == NULL, "the banner is printed once per process");
  cr_expect(strstr(log, "AllReduce") != NULL, "COLL logs each collective: %s", log);
}

/* Ranks as processes, with per-rank environment; each reports its init's code and message. */
struct report {
  int done, rc;
  char msg[1024];
};
struct scenario {
  int hosts;                       /* > 0: rank r is on emulated host r % hosts */
  const char *env, *value;         /* set in every rank before init */
  struct report r[4];
};

static void rankMain(void *shared, weftUniqueId id, int rank, int nranks) {
  struct scenario *sc = shared;
  char host[32];
  if (sc->hosts > 0) {
    snprintf(host, sizeof host, "settingshost%d", rank % sc->hosts);
    setenv("WEFT_HOSTID", host, 1);
  }
  setenv(sc->env, sc->value, 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  snprintf(sc->r[rank].msg, sizeof sc->r[rank].msg, "%s", weftGetLastError(NULL));
  sc->r[rank].rc = rc;
  sc->r[rank].done = 1;
  if (rc == weftSuccess) weftCommDestroy(comm);
  _exit(0);
}

static struct scenario *runScenario(int nranks, int hosts, const char *env, const char *value) {
  struct scenario *sc = forkedShared(sizeof *sc);
  sc->hosts = hosts;
  sc->env = env;
  sc->value = value;
  pid_t pids[4];
  forkedLaunch(nranks, rankMain, sc, pids);
  forkedReap(pids, nranks, 40000);
  return sc;
}

/* Every rank fails with weftInvalidArgument and a message holding each needle. */
static void expectEveryRank(struct scenario *sc, int nranks, const char *needle1, const char *needle2) {
  for (int r = 0; r < nranks; r++) {
    cr_expect(sc->r[r].done, "rank %d did not finish", r);
    cr_expect_eq(sc->r[r].rc, weftInvalidArgument, "rank %d: rc %d: %s", r, sc->r[r].rc, sc->r[r].msg);
    cr_expect(strstr(sc->r[r].msg, needle1) != NULL, "rank %d: \"%s\" lacks \"%s\"", r, sc->r[r].msg, needle1);
    cr_expect(strstr(sc->r[r].msg, needle2) != NULL, "rank %d: \"%s\" lacks \"%s\"", r, sc->r[r].msg, needle2);
  }
}

Test(settings, forced_hier_on_one_host_says_why, .timeout = 60) {
  struct scenario *sc = runScenario(2, 0, "WEFT_ALGO", "hier");
  expectEveryRank(sc, 2, "WEFT_ALGO=hier cannot run on this communicator",
                  "it needs 2 or more hosts, and all 2 ranks share one host");
}

Test(settings, forced_hiernuma_on_one_numa_node_says_why, .timeout = 60) {
  struct scenario *sc = runScenario(2, 0, "WEFT_ALGO", "hiernuma");
  expectEveryRank(sc, 2, "WEFT_ALGO=hiernuma cannot run on this communicator", "NUMA node");
}

/* One rank per host: hier's schedules run along the ring of the leaders (every rank). */
Test(settings, forced_hier_with_one_rank_per_host_runs, .timeout = 60) {
  struct scenario *sc = runScenario(2, 2, "WEFT_ALGO", "hier");
  for (int r = 0; r < 2; r++)
    cr_expect(sc->r[r].done && sc->r[r].rc == weftSuccess, "rank %d: rc %d: %s", r, sc->r[r].rc,
              sc->r[r].msg);
}

Test(settings, forced_direct_across_hosts_says_why, .timeout = 60) {
  struct scenario *sc = runScenario(2, 2, "WEFT_ALGO", "direct");
  expectEveryRank(sc, 2, "WEFT_ALGO=direct cannot run on this communicator",
                  "it needs every rank on one host (shared memory), and the ranks span 2 hosts");
}

Test(settings, forced_transport_that_cannot_connect_says_why, .timeout = 60) {
  struct scenario *sc = runScenario(2, 2, "WEFT_TRANSPORTS", "shm");
  expectEveryRank(sc, 2, "no transport can connect rank",
                  "shm: it cannot connect these two ranks; " UCX_NOT_ASKED "tcp: not in WEFT_TRANSPORTS=\"shm\"");
}

/* WEFT_TRANSPORTS: a list allows the transports it names, "^" first all but those. */
Test(settings, transport_list_with_exclusion, .timeout = 10) {
  cr_expect(weftTransportAllowed("", "tcp"));
  cr_expect(weftTransportAllowed("shm,tcp", "tcp"));
  cr_expect(!weftTransportAllowed("shm,tcp", "verbs"));
  cr_expect(!weftTransportAllowed("^verbs", "verbs"));
  cr_expect(!weftTransportAllowed("^ucx,VERBS", "verbs"));
  cr_expect(weftTransportAllowed("^verbs", "tcp"));
  cr_expect(weftTransportAllowed("^verbs,ucx", "shm"));
  char allowed[256];
  cr_expect_eq(weftTransportsCheckList("^verbs", allowed, sizeof allowed), weftTransportsCheckList("verbs", allowed, sizeof allowed));
  cr_expect_eq(weftTransportsCheckList("^tcp,shm", allowed, sizeof allowed), 0);
  cr_expect_eq(weftTransportsCheckList("^", allowed, sizeof allowed), -1);
}

/* docs/env.md holds the generated table exactly (make env-doc writes it). */
Test(settings, docs_env_md_is_the_generated_table, .timeout = 10) {
  FILE *doc = fopen("docs/env.md", "r");
  if (doc == NULL) doc = fopen("../docs/env.md", "r");
  cr_assert_not_null(doc, "docs/env.md not found (run from the repository root)");
  static char docText[1 << 16];
  size_t n = fread(docText, 1, sizeof docText - 1, doc);
  docText[n] = '\0';
  fclose(doc);
  static const char begin[] = "<!-- weft-info --env-md: generated, do not edit -->\n";
  static const char end[] = "<!-- end of the generated table -->\n";
  char *from = strstr(docText, begin), *to = from != NULL ? strstr(from, end) : NULL;
  cr_assert(from != NULL && to != NULL, "docs/env.md lacks the generated table's markers");
  from += strlen(begin);
  *to = '\0';
  char *table = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&table, &len);
  weftParamsPrintMarkdown(f);
  fclose(f);
  cr_expect_str_eq(from, table, "docs/env.md differs from the declarations: run make env-doc");
  free(table);
}

/* WEFT_ALGO in NCCL_ALGO's syntax: what is refused, and what each accepted form lets run. */
Test(settings, algo_syntax_refused, .timeout = 30) {
  static const char *const bad[] = {"allreduce:", "foo:ring", "ring;;tree", "ring,,tree", "^",
                                    "ring,bogus", "^ring,direct,tree,hier,hiernuma",
                                    "allreduce:^ring,direct,tree,hier,hiernuma",
                                    "^ring,direct,hier" /* leaves AllGather none */, "allgather:tree"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv("WEFT_ALGO", bad[i], 1);
    weftUniqueId id;
    expectRefused(weftGetUniqueId(&id), "WEFT_ALGO", bad[i], "a comma list of ring direct tree hier");
  }
}

struct algoCase {
  const char *spec;
  const char *allowed[4]; /* the algorithms the tuner may answer, NULL-terminated */
};

static long algoCaseBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct algoCase *c = arg;
  (void)rank, (void)nranks;
  long bad = 0;
  for (size_t count = 1; count <= (1u << 24); count *= 16) {
    const char *name = NULL;
    if (weftCommGetAlgorithm(comm, count, weftFloat32, &name) != weftSuccess) return 1;
    int ok = 0;
    for (int i = 0; i < 4 && c->allowed[i] != NULL; i++) ok |= strcmp(name, c->allowed[i]) == 0;
    if (!ok) fprintf(stderr, "WEFT_ALGO=%s: %zu floats ran %s\n", c->spec, count, name);
    bad += !ok;
  }
  return bad;
}

Test(settings, algo_syntax_effect, .timeout = 120) {
  static const struct algoCase cases[] = {
      {"ring", {"ring"}},
      {"TREE", {"tree"}},
      {"ring,tree", {"ring", "tree"}},
      {"allreduce:^ring,tree", {"direct"}}, /* hier cannot run on one host */
      {"^tree,hier", {"ring", "direct"}},
      {"allreduce:direct", {"direct"}},
      {"allreduce:ring;allreduce:tree", {"tree"}}, /* a later entry replaces an earlier one */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    setenv("WEFT_ALGO", cases[i].spec, 1);
    cr_expect_eq(runRanks(1, 4, algoCaseBody, (void *)&cases[i], 60), 0, "WEFT_ALGO=%s", cases[i].spec);
  }
}

Test(settings, algo_list_that_cannot_run_says_why, .timeout = 60) {
  struct scenario *sc = runScenario(2, 0, "WEFT_ALGO", "allreduce:hier,hier");
  expectEveryRank(sc, 2, "WEFT_ALGO=allreduce:hier,hier cannot run on this communicator",
                  "it needs 2 or more hosts");
}
