/* What this machine can do, probed without the library (gpu excepted: the library's runtime is
 * the one that must find the device), for the tests' skips. A test may skip only because a
 * capability outside the project is missing, and says which: its message contains "[needs CAP]"
 * (SKIP_UNLESS does this). tests/run-all.sh probes the capability again with build/tests/caps
 * (the same probes, run outside any test) and, under WEFT_TESTS_REQUIRE, fails a skip whose
 * capability is present, and always fails a skip that names none.
 *
 * Capabilities: root, netns (new network namespaces holding a bridge and a veth pair), ipv6
 * (a loopback socket), cma (process_vm_readv between two sibling processes), cpu01 (CPUs 0 and
 * 1 both in the affinity mask), x86, f16c, avx2 (with f16c), avx512 (f, bw, vl), rdma (an RDMA
 * device with an ACTIVE port in sysfs; also named verbs, as the transport conformance suite
 * names a transport's own capability), qemu (what tests/rdma/rdma-vm-run needs to boot), gpu
 * (a device the library's accelerator runtime can use: weftDeviceCount > 0, asked in a child
 * process so that the caller may still fork and use CUDA; the reason is the library's, "no GPU:
 * ..." or a build without CUDA), and cmd:NAME (NAME is on PATH). */
#ifndef WEFT_TEST_CAPS_H_
#define WEFT_TEST_CAPS_H_

#include <stddef.h>

/* 1 if this machine has cap; 0 with the reason in why; -1 for a name no probe knows. */
int capHave(const char *cap, char *why, size_t len);

/* In a Criterion test: skips it, naming cap and why, unless the machine has cap. */
#define SKIP_UNLESS(cap)                                                             \
  do {                                                                               \
    char why_[256];                                                                  \
    if (capHave(cap, why_, sizeof why_) != 1) cr_skip_test("[needs %s] %s", cap, why_); \
  } while (0)

#endif
