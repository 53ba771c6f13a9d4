/* Linked into a weft benchmark with tests/common/emudev.c (the Makefile's
 * build/tests/bench/emu/<name>): the emulated device (device memory the host cannot touch,
 * streams on threads) is the library's runtime before main runs, so the benchmark's device
 * buffer path (bench/perf_device.c) runs, and is checked by tests/bench/test-perf-device.sh,
 * where no GPU is. */
#include "emudev.h"

__attribute__((constructor)) static void emuInstallFirst(void) { emuInstall(); }
