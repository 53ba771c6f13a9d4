/* The accelerator runtime of this build (lib/device.h: devices/cuda/ in a CUDA build, none in a
 * CPU-only one) and weftMemAlloc / weftMemFree over it.
 *
 * Everywhere: the device count says why it is 0; a malloc buffer is host memory; weftMemAlloc
 * and weftMemFree answer as NCCL's do for what this machine has (the "no GPU" error and its
 * message where there is none). On a GPU (skipped with [needs gpu] and the library's reason
 * elsewhere, and in a build without CUDA): device memory, a copy round trip, events, a stream
 * held by streamWaitFlag until a host thread writes the flag (the driver's wait and the
 * polling kernel both), and an IPC handle opened by a forked process. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "caps.h"
#include "device.h"
#include "weft.h"
#ifdef WEFT_HAVE_CUDA
#include "../../devices/cuda/cuda_wait.h"
#endif

TestSuite(device, .timeout = 60);

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- what holds on every machine ---- */

Test(device, count_says_why_it_is_zero) {
  char why[256] = "";
  int n = weftDeviceCount(why, sizeof why);
  char probe[256];
  cr_assert_eq(n > 0, capHave("gpu", probe, sizeof probe) == 1, "the gpu probe and the library agree");
  if (n > 0) return; /* a GPU machine: why is not written */
#ifdef WEFT_HAVE_CUDA
  cr_expect(strncmp(why, "no GPU: ", 8) == 0, "a CUDA build names what is missing: '%s'", why);
  cr_expect(strlen(why) > 8, "and says it in CUDA's words: '%s'", why);
#else
  cr_expect(strstr(why, "no accelerator runtime") != NULL, "a CPU-only build says so: '%s'", why);
#endif
}

Test(device, malloc_memory_is_host_memory) {
  const struct weftDeviceOps *ops = weftDeviceRuntime();
#ifdef WEFT_HAVE_CUDA
  cr_assert_not_null(ops, "a CUDA build has its runtime");
  cr_expect_str_eq(ops->name, "cuda");
  char *p = malloc(4096);
  enum weftMemKind kind = WEFT_MEM_DEVICE;
  int dev = 7;
  cr_assert_eq(ops->pointerKind(p, &kind, &dev), weftSuccess, "%s", weftGetLastError(NULL));
  cr_expect_eq(kind, WEFT_MEM_HOST);
  cr_expect_eq(dev, -1);
  int onStack = 0;
  cr_assert_eq(ops->pointerKind(&onStack, &kind, &dev), weftSuccess, "%s", weftGetLastError(NULL));
  cr_expect_eq(kind, WEFT_MEM_HOST, "stack memory is the host's too");
  free(p);
#else
  cr_expect_null(ops, "a CPU-only build has no runtime: every buffer is host memory");
#endif
}

Test(device, mem_alloc_answers_as_ncclMemAlloc) {
  cr_expect_eq(weftMemAlloc(NULL, 64), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(NULL), "ptr is NULL") != NULL, "%s", weftGetLastError(NULL));
  char why[256] = "";
  void *sentinel = &why, *p = sentinel;
  if (weftDeviceCount(why, sizeof why) == 0) {
    cr_expect_eq(weftMemAlloc(&p, 1 << 20), weftUnhandledCudaError);
    cr_expect(strstr(weftGetLastError(NULL), why) != NULL, "the message says why: '%s' (want '%s')",
              weftGetLastError(NULL), why);
    cr_expect_eq(p, sentinel, "*ptr is written only on success");
    cr_expect_eq(weftMemAlloc(&p, 0), weftUnhandledCudaError, "size 0 too: cudaMalloc fails first");
    return;
  }
  cr_assert_eq(weftMemAlloc(&p, 0), weftSuccess, "%s", weftGetLastError(NULL));
  cr_expect_null(p, "size 0 is NULL, as cudaMalloc's");
  cr_assert_eq(weftMemAlloc(&p, 1 << 20), weftSuccess, "%s", weftGetLastError(NULL));
  enum weftMemKind kind;
  int dev, cur;
  cr_assert_eq(weftDeviceRuntime()->pointerKind(p, &kind, &dev), weftSuccess);
  cr_assert_eq(weftDeviceRuntime()->getDevice(&cur), weftSuccess);
  cr_expect_eq(kind, WEFT_MEM_DEVICE);
  cr_expect_eq(dev, cur, "on the current device");
  cr_expect_eq(weftMemFree(p), weftSuccess, "%s", weftGetLastError(NULL));
}

Test(device, mem_free_of_null_answers_as_ncclMemFree) {
  char why[256] = "";
  if (weftDeviceCount(why, sizeof why) > 0) {
    cr_expect_eq(weftMemFree(NULL), weftSuccess, "cudaFree(NULL) does nothing");
    return;
  }
  cr_expect_eq(weftMemFree(NULL), weftUnhandledCudaError, "ncclMemFree's cudaGetDevice fails first");
  cr_expect(strstr(weftGetLastError(NULL), why) != NULL, "%s", weftGetLastError(NULL));
}

/* ---- on a GPU ---- */

static const struct weftDeviceOps *gpu(void) {
  SKIP_UNLESS("gpu");
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  cr_assert_not_null(ops);
  return ops;
}

#define OK(call) cr_assert_eq((call), weftSuccess, "%s: %s", #call, weftGetLastError(NULL))

Test(device, alloc_and_free_device_memory) {
  const struct weftDeviceOps *ops = gpu();
  void *p = NULL;
  OK(ops->alloc(&p, 3 << 20));
  cr_assert_not_null(p);
  enum weftMemKind kind;
  int dev, cur;
  OK(ops->pointerKind((char *)p + 12345, &kind, &dev));
  OK(ops->getDevice(&cur));
  cr_expect_eq(kind, WEFT_MEM_DEVICE, "inside the allocation too");
  cr_expect_eq(dev, cur);
  OK(ops->free(p));
  void *h, *hd;
  OK(ops->hostAlloc(&h, &hd, 4096));
  OK(ops->pointerKind(h, &kind, &dev));
  cr_expect_eq(kind, WEFT_MEM_HOST, "pinned host memory is host memory");
  OK(ops->hostFree(h));
}

Test(device, copy_round_trip) {
  const struct weftDeviceOps *ops = gpu();
  enum { N = 1 << 20 };
  uint32_t *src = malloc(N * 4), *back = calloc(N, 4);
  for (uint32_t i = 0; i < N; i++) src[i] = i * 2654435761u;
  void *d1, *d2, *s;
  OK(ops->alloc(&d1, N * 4));
  OK(ops->alloc(&d2, N * 4));
  OK(ops->streamCreate(&s));
  OK(ops->copyAsync(d1, src, N * 4, s));       /* host to device */
  OK(ops->copyAsync(d2, d1, N * 4, s));        /* device to device */
  OK(ops->copyAsync(back, d2, N * 4, s));      /* device to host */
  OK(ops->streamSync(s));
  cr_expect_eq(memcmp(src, back, N * 4), 0, "the bytes came back");
  OK(ops->streamDestroy(s));
  OK(ops->free(d1));
  OK(ops->free(d2));
  free(src);
  free(back);
}

Test(device, events_mark_work_done) {
  const struct weftDeviceOps *ops = gpu();
  void *s, *e, *d;
  char host[4096];
  memset(host, 5, sizeof host);
  OK(ops->streamCreate(&s));
  OK(ops->eventCreate(&e));
  OK(ops->alloc(&d, sizeof host));
  OK(ops->copyAsync(d, host, sizeof host, s));
  OK(ops->eventRecord(e, s));
  OK(ops->eventSync(e));
  cr_expect_eq(ops->eventQuery(e), 1, "%s", weftGetLastError(NULL));
  OK(ops->eventDestroy(e));
  OK(ops->streamDestroy(s));
  OK(ops->free(d));
}

struct release {
  volatile uint32_t *flag;
  uint32_t value;
  int afterMs;
};

static void *releaseLater(void *arg) {
  struct release *r = arg;
  sleepMs(r->afterMs);
  __atomic_store_n(r->flag, r->value, __ATOMIC_RELEASE);
  return NULL;
}

typedef weftResult_t (*waitFn)(const struct weftDeviceOps *ops, void *s, void *flagDev, uint32_t value);

static weftResult_t waitByOps(const struct weftDeviceOps *ops, void *s, void *flagDev, uint32_t value) {
  return ops->streamWaitFlag(s, flagDev, value);
}

/* The stream holds a copy behind the wait until a host thread writes the flag: the event after
 * the copy stays not done, then completes, and the copy's bytes arrive. from is where the flag
 * starts: just below value, or far below it across the 2^32 wrap (the cyclic order). */
static void heldUntilReleased(waitFn wait, uint32_t from, uint32_t value) {
  const struct weftDeviceOps *ops = gpu();
  void *s, *e, *d, *flagHost, *flagDev;
  OK(ops->streamCreate(&s));
  OK(ops->eventCreate(&e));
  OK(ops->hostAlloc(&flagHost, &flagDev, 64));
  volatile uint32_t *flag = flagHost;
  *flag = from;
  char in[256], out[256];
  memset(in, 0x3c, sizeof in);
  memset(out, 0, sizeof out);
  OK(ops->alloc(&d, sizeof in));
  OK(wait(ops, s, flagDev, value));
  OK(ops->copyAsync(d, in, sizeof in, s));
  OK(ops->copyAsync(out, d, sizeof out, s));
  OK(ops->eventRecord(e, s));
  sleepMs(200);
  cr_expect_eq(ops->eventQuery(e), 0, "the stream waits for the flag (%u < %u)", from, value);
  struct release r = {flag, value, 100};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, releaseLater, &r), 0);
  OK(ops->eventSync(e));
  pthread_join(t, NULL);
  cr_expect_eq(ops->eventQuery(e), 1);
  cr_expect_eq(memcmp(in, out, sizeof in), 0, "the copies behind the wait ran");
  OK(ops->free(d));
  OK(ops->hostFree(flagHost));
  OK(ops->eventDestroy(e));
  OK(ops->streamDestroy(s));
}

Test(device, stream_waits_for_a_host_flag) { heldUntilReleased(waitByOps, 6, 7); }
Test(device, stream_wait_is_cyclic_across_the_wrap) { heldUntilReleased(waitByOps, 0xfffffff0u, 3); }

#ifdef WEFT_HAVE_CUDA
/* The fallback for drivers that refuse stream memory operations, run here on purpose. */
static weftResult_t waitByKernel(const struct weftDeviceOps *ops, void *s, void *flagDev, uint32_t value) {
  (void)ops;
  return weftCudaLaunchWaitFlag((cudaStream_t)s, flagDev, value) == cudaSuccess ? weftSuccess : weftUnhandledCudaError;
}
#endif

Test(device, polling_kernel_waits_for_a_host_flag) {
#ifdef WEFT_HAVE_CUDA
  heldUntilReleased(waitByKernel, 6, 7);
  heldUntilReleased(waitByKernel, 0xfffffff0u, 3);
#else
  SKIP_UNLESS("gpu"); /* says why: this build has no runtime */
#endif
}

/* ---- IPC: a handle made here, opened by a forked process ---- */

enum { IPC_BYTES = 1 << 16 };

static int readAll(int fd, void *buf, size_t n) {
  for (size_t o = 0; o < n;) {
    ssize_t r = read(fd, (char *)buf + o, n - o);
    if (r <= 0) return -1;
    o += (size_t)r;
  }
  return 0;
}

/* The child: opens the parent's memory, checks the parent's bytes and writes its own. Its exit
 * status says which step failed. CUDA starts here after the fork (the parent's probe of the
 * gpu cap ran in a process of its own, and the parent starts CUDA only after forking). */
static int ipcChild(int handleFd, int doneFd) {
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  struct weftDeviceIpc h;
  if (readAll(handleFd, &h, sizeof h) != 0) return 2;
  void *peer, *s;
  if (ops->ipcOpen(&h, &peer) != weftSuccess) return 3;
  if (ops->streamCreate(&s) != weftSuccess) return 4;
  static unsigned char got[IPC_BYTES], mine[IPC_BYTES];
  if (ops->copyAsync(got, peer, IPC_BYTES, s) != weftSuccess || ops->streamSync(s) != weftSuccess) return 5;
  for (int i = 0; i < IPC_BYTES; i++)
    if (got[i] != (unsigned char)(i * 7)) return 6;
  for (int i = 0; i < IPC_BYTES; i++) mine[i] = (unsigned char)(i * 13 + 1);
  if (ops->copyAsync(peer, mine, IPC_BYTES, s) != weftSuccess || ops->streamSync(s) != weftSuccess) return 7;
  if (ops->ipcClose(peer) != weftSuccess) return 8;
  char done = 1;
  return write(doneFd, &done, 1) == 1 ? 0 : 9;
}

Test(device, ipc_handle_opened_by_a_forked_process) {
  const struct weftDeviceOps *ops = gpu();
  int toChild[2], toParent[2];
  cr_assert_eq(pipe(toChild), 0);
  cr_assert_eq(pipe(toParent), 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) _exit(ipcChild(toChild[0], toParent[1]));
  static unsigned char pattern[IPC_BYTES], back[IPC_BYTES];
  for (int i = 0; i < IPC_BYTES; i++) pattern[i] = (unsigned char)(i * 7);
  void *d, *s;
  struct weftDeviceIpc h;
  OK(ops->alloc(&d, IPC_BYTES));
  OK(ops->streamCreate(&s));
  OK(ops->copyAsync(d, pattern, IPC_BYTES, s));
  OK(ops->streamSync(s));
  OK(ops->ipcGet(d, &h));
  cr_assert_eq(write(toChild[1], &h, sizeof h), (ssize_t)sizeof h);
  char done = 0;
  cr_expect_eq(readAll(toParent[0], &done, 1), 0, "the child finished its part");
  int status = 0;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child failed at step %d (2 read, 3 open, 4 stream, "
            "5 copy, 6 parent's bytes, 7 write, 8 close, 9 report)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  OK(ops->copyAsync(back, d, IPC_BYTES, s));
  OK(ops->streamSync(s));
  int same = 1;
  for (int i = 0; i < IPC_BYTES && same; i++) same = back[i] == (unsigned char)(i * 13 + 1);
  cr_expect(same, "the child's bytes are in this process's memory");
  OK(ops->streamDestroy(s));
  OK(ops->free(d));
}

Test(device, peer_access_to_itself_is_there) {
  const struct weftDeviceOps *ops = gpu();
  int cur;
  OK(ops->getDevice(&cur));
  cr_expect_eq(ops->enablePeer(cur), 0, "%s", weftGetLastError(NULL));
}
