# weft: `make` builds the libraries, the benchmarks and the tests; `make bench` and
# `make check` also install what a fresh Debian machine is missing (install-deps.sh).
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
DATADIR ?= $(PREFIX)/share
CC ?= gcc
MPICC ?= mpicc
BUILD := build
# The version is include/weft.h's (WEFT_MAJOR/MINOR/PATCH); the SONAME carries the major only.
weftVersionPart = $(shell sed -n 's/^\#define WEFT_$(1) \([0-9]*\)$$/\1/p' include/weft.h)
SOMAJOR := $(call weftVersionPart,MAJOR)
VERSION := $(SOMAJOR).$(call weftVersionPart,MINOR).$(call weftVersionPart,PATCH)
SONAME := libweft.so.$(SOMAJOR)
SOFILE := libweft.so.$(VERSION)

HWLOC_CFLAGS := $(shell pkg-config --cflags hwloc 2>/dev/null)
HWLOC_LIBS := $(shell pkg-config --libs hwloc 2>/dev/null || echo -lhwloc)
# libsodium: the bootstrap's and the TCP transport's MAC (keyed BLAKE2b, lib/boot_auth.c).
SODIUM_CFLAGS := $(shell pkg-config --cflags libsodium 2>/dev/null)
SODIUM_LIBS := $(shell pkg-config --libs libsodium 2>/dev/null || echo -lsodium)

# UCX (Debian's libucx-dev): the ucx transport, built where UCX is installed (install-deps.sh
# installs it); without it the transport's folder and its registry line drop out. WITH_UCX=no
# leaves it out on purpose: the TSan build does, because libucm interposes mmap/madvise and
# takes a lock from inside glibc's thread exit, where TSan's runtime cannot run.
WITH_UCX ?= yes
UCX_LIBS := $(if $(filter yes,$(WITH_UCX)),$(shell pkg-config --libs ucx 2>/dev/null))
UCX_CFLAGS := $(if $(UCX_LIBS),$(shell pkg-config --cflags ucx) -DWEFT_HAVE_UCX)

# libibverbs + librdmacm (Debian's libibverbs-dev, librdmacm-dev): the verbs transport
# (transports/verbs/), built where they are installed (install-deps.sh installs them); without
# them its folder and its registry line drop out. WITH_VERBS=no leaves it out on purpose.
WITH_VERBS ?= yes
VERBS_LIBS := $(if $(filter yes,$(WITH_VERBS)),$(shell pkg-config --libs libibverbs librdmacm 2>/dev/null))
VERBS_CFLAGS := $(if $(VERBS_LIBS),$(shell pkg-config --cflags libibverbs librdmacm) -DWEFT_HAVE_VERBS)

# CUDA (devices/cuda/, lib/device.h): built where nvcc and the runtime's headers are found under
# CUDA_HOME; WITH_CUDA=no leaves it out on purpose (the sanitizer and fuzz builds do). The
# runtime is linked statically and it loads the driver (libcuda.so.1) itself when first called,
# so libweft.so loads on a machine with no driver and the CUDA paths report why they cannot
# run; never -lcuda. Without CUDA make says so once (WEFT_CUDA_SAID: not again in sub-makes).
WITH_CUDA ?= yes
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CUDA_WHY := $(if $(filter yes,$(WITH_CUDA)),$(if $(shell command -v $(NVCC) 2>/dev/null),$(if \
  $(wildcard $(CUDA_HOME)/include/cuda_runtime.h),$(if $(wildcard $(CUDA_HOME)/lib64/libcudart_static.a),,no \
  $(CUDA_HOME)/lib64/libcudart_static.a),no $(CUDA_HOME)/include/cuda_runtime.h),no nvcc at $(NVCC)),WITH_CUDA=$(WITH_CUDA))
ifeq ($(CUDA_WHY),)
CUDA_CFLAGS := -DWEFT_HAVE_CUDA -I$(CUDA_HOME)/include
# -lstdc++: nvcc's launch stubs guard a static and carry C++ unwinding. (The -ldl -lrt -lpthread
# the static runtime needs end LIBS.)
CUDA_LIBS := $(CUDA_HOME)/lib64/libcudart_static.a -lstdc++
CUDA_PC_LIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++
CUDA_SO_FLAGS := -Wl,--exclude-libs,libcudart_static.a
else
CUDA_SAY := weft: building without CUDA ($(CUDA_WHY)): host buffers only
ifneq ($(WEFT_CUDA_SAID),$(CUDA_SAY))
$(info $(CUDA_SAY))
endif
export WEFT_CUDA_SAID := $(CUDA_SAY)
endif
# The runtimes' folders this build compiles (devices/<name>/), kept in $(BUILD)/.devices: every
# library object is rebuilt when they change (WITH_CUDA=no after a CUDA build in one tree), and
# tests/tools/layering.py knows which devices objects to expect.
DEVICE_DIRS := $(if $(CUDA_LIBS),cuda)
# Kernels for sm_80 and sm_90, and sm_90's PTX that newer GPUs' drivers compile at load. No
# fused multiply-add: the kernels' arithmetic is the host reductions', bit for bit.
NVCC_FLAGS := -std=c++17 -O2 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror --Werror all-warnings \
  -fmad=false -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
  -gencode arch=compute_90,code=compute_90 -Iinclude -Ilib

WARN := -Wall -Wextra -Werror
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -fPIC -pthread -Iinclude -Ilib $(HWLOC_CFLAGS) \
  $(SODIUM_CFLAGS) $(UCX_CFLAGS) $(VERBS_CFLAGS) $(CUDA_CFLAGS)
LIBS := $(HWLOC_LIBS) $(SODIUM_LIBS) $(UCX_LIBS) $(VERBS_LIBS) $(CUDA_LIBS) -lpthread -lm -lrt -ldl

LIB_SRCS := $(wildcard lib/*.c) $(filter-out $(if $(UCX_LIBS),,transports/ucx/%) $(if $(VERBS_LIBS),,transports/verbs/%),$(wildcard transports/*/*.c)) \
  $(wildcard algorithms/*.c) $(if $(CUDA_LIBS),$(wildcard devices/cuda/*.c))
CU_SRCS := $(if $(CUDA_LIBS),$(wildcard devices/cuda/*.cu))
LIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRCS)) $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRCS))
UNIT_SRCS := $(wildcard tests/unit/*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRCS))
TRANSPORT_TEST_SRCS := $(wildcard tests/transport/*.c)
TRANSPORT_TEST_BINS := $(patsubst tests/transport/%.c,$(BUILD)/tests/transport/%,$(TRANSPORT_TEST_SRCS))
COLL_SRCS := $(wildcard tests/coll/*.c)
COLL_BINS := $(patsubst tests/coll/%.c,$(BUILD)/tests/coll/%,$(COLL_SRCS))
NET_SRCS := $(wildcard tests/net/*.c)
NET_BINS := $(patsubst tests/net/%.c,$(BUILD)/tests/net/%,$(NET_SRCS))
# tests/fault: each test_*.c is a binary; the other .c files (the fault-injection wrapper) are
# linked into every one of them.
FAULT_SRCS := $(wildcard tests/fault/test_*.c)
FAULT_BINS := $(patsubst tests/fault/%.c,$(BUILD)/tests/fault/%,$(FAULT_SRCS))
FAULT_HELPERS := $(filter-out $(FAULT_SRCS),$(wildcard tests/fault/*.c))
MPI_TEST_SRCS := $(wildcard tests/mpi/*.c)
MPI_TEST_BINS := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(MPI_TEST_SRCS))
TEST_COMMON := $(wildcard tests/common/*.c)
# Compiled once and linked into every test binary (not an archive: each object is linked,
# used or not, as when the sources were compiled into each binary).
TEST_COMMON_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(TEST_COMMON))
# bench/<name>.c is a benchmark; bench/perf_*.c, the driver they share, is linked into each.
BENCH_COMMON := $(wildcard bench/perf_*.c)
BENCH_COMMON_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(BENCH_COMMON))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(filter-out $(BENCH_COMMON),$(wildcard bench/*.c)))
# The weft benchmarks again, each with tests/bench/wrong_result.c linked in (a strong weftX over
# the library's weak one changes one element of rank 0's result): tests/bench/test-perf-flags.sh
# checks that the wrong element is reported.
BENCH_WRONG_BINS := $(patsubst bench/%.c,$(BUILD)/tests/bench/%,$(filter-out bench/mpi_%.c bench/init_perf.c bench/memcpy_perf.c \
  $(BENCH_COMMON),$(wildcard bench/*.c)))
# The weft benchmarks again, on an emulated device (tests/common/emudev.c, installed before main
# by tests/bench/emu_install.c): their device-buffer path, checked by
# tests/bench/test-perf-device.sh where no GPU is; emu-wrong/allreduce_perf also has
# wrong_result.c, whose changed element must be reported there too.
BENCH_EMU_BINS := $(patsubst $(BUILD)/tests/bench/%,$(BUILD)/tests/bench/emu/%,$(BENCH_WRONG_BINS)) \
  $(BUILD)/tests/bench/emu-wrong/allreduce_perf
# Installed commands (tools/*.c), linked with libweft.a: they print the library's own tables.
TOOL_BINS := $(patsubst tools/%.c,$(BUILD)/tools/%,$(wildcard tools/*.c))
# weft-sim's model (tools/sim/*.c: fabric, schedules from the algorithms' own run(), engine),
# linked into tools/weft-sim and the tests of tests/sim; it reads the algorithms' headers.
SIM_SRCS := $(wildcard tools/sim/*.c)
SIM_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(SIM_SRCS))
SIM_FABRICS := $(wildcard tools/sim/fabrics/*.fabric)
SIM_TEST_BINS := $(patsubst tests/sim/%.c,$(BUILD)/tests/sim/%,$(wildcard tests/sim/*.c))
# Helpers of the test scripts (tests/tools/*.c, no Criterion), e.g. the capability probe.
TEST_TOOL_SRCS := $(wildcard tests/tools/*.c)
TEST_TOOL_BINS := $(patsubst tests/tools/%.c,$(BUILD)/tests/tools/%,$(TEST_TOOL_SRCS))
# Programs of make check-tsan (tests/tsan/*.c, no Criterion: it cannot start under TSan);
# built with every tree so that they compile cleanly everywhere.
TSAN_SRCS := $(wildcard tests/tsan/*.c)
TSAN_BINS := $(patsubst tests/tsan/%.c,$(BUILD)/tests/tsan/%,$(TSAN_SRCS))
# Programs of the documentation (docs/examples), built and run by make check.
EXAMPLE_BINS := $(patsubst docs/examples/%.c,$(BUILD)/examples/%,$(wildcard docs/examples/*.c))

DEPS_STAMP := $(BUILD)/.deps-ok

# pytorch.mk defines targets: `make` alone must still build everything, not its first one.
.DEFAULT_GOAL := all
include bindings/pytorch/pytorch.mk

.PHONY: all lib tools benches tests bench check check-rdma check-layering deps install uninstall clean env-doc FORCE fuzz fuzz-build check-asan check-tsan
all: lib tools benches tests pytorch
tools: $(TOOL_BINS)
lib: $(BUILD)/libweft.so $(BUILD)/$(SONAME) $(BUILD)/libweft.a
benches: $(BENCH_BINS) $(EXAMPLE_BINS)
tests: $(UNIT_BINS) $(TRANSPORT_TEST_BINS) $(COLL_BINS) $(NET_BINS) $(FAULT_BINS) $(MPI_TEST_BINS) \
  $(TEST_TOOL_BINS) $(TSAN_BINS) $(BENCH_WRONG_BINS) $(BENCH_EMU_BINS) $(SIM_TEST_BINS)

# Installs missing packages once per build tree (and again when install-deps.sh changes).
$(DEPS_STAMP): install-deps.sh
	./install-deps.sh
	@mkdir -p $(BUILD) && touch $@
deps: $(DEPS_STAMP)

# Library objects: only what include/weft.h declares is exported (WEFT_API, lib/api.h).
$(BUILD)/%.o: %.c $(wildcard include/*.h lib/*.h lib/*.def transports/*/*.h algorithms/*.h devices/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fvisibility=hidden $(OBJ_CFLAGS) -c $< -o $@

# CUDA sources (devices/*/*.cu), by nvcc: device code and the host functions that launch it.
$(BUILD)/%.o: %.cu $(wildcard include/*.h lib/*.h devices/*/*.h devices/*/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_FLAGS) -c $< -o $@

# The source revision in the version banner: lib/version.o alone is rebuilt when it changes.
GIT_REV := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(BUILD)/.git-rev: FORCE
	@mkdir -p $(BUILD) && (echo '$(GIT_REV)' | cmp -s - $@ || echo '$(GIT_REV)' > $@)
$(BUILD)/.devices: FORCE
	@mkdir -p $(BUILD) && (echo '$(DEVICE_DIRS)' | cmp -s - $@ || echo '$(DEVICE_DIRS)' > $@)
$(LIB_OBJS): $(BUILD)/.devices
$(BUILD)/lib/version.o: $(BUILD)/.git-rev
$(BUILD)/lib/version.o: OBJ_CFLAGS = -DWEFT_GIT_REV='"$(GIT_REV)"'
FORCE:

# libweft.so.X.Y.Z with SONAME libweft.so.X, and the two links a distribution ships. CFLAGS on
# the link too: a sanitizer build's runtime must come with it (-z defs refuses any symbol left
# undefined).
# --exclude-libs: the static CUDA runtime's functions stay inside (the library exports weft.h only).
$(BUILD)/$(SOFILE): $(LIB_OBJS)
	$(CC) $(CFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,-z,defs $(CUDA_SO_FLAGS) -o $@ $^ $(LIBS)
$(BUILD)/$(SONAME): $(BUILD)/$(SOFILE)
	ln -sf $(SOFILE) $@
$(BUILD)/libweft.so: $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $@
$(BUILD)/libweft.a: $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

# The benchmarks' shared driver and the tests' common code, compiled once per build tree (and
# kept: make deletes what only pattern rules name).
.SECONDARY: $(BENCH_COMMON_OBJS) $(TEST_COMMON_OBJS)
$(BUILD)/bench/perf_%.o: bench/perf_%.c $(wildcard bench/*.h include/*.h lib/*.h)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -c $< -o $@
$(BUILD)/tests/common/%.o: tests/common/%.c $(wildcard tests/common/*.h include/*.h lib/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common -c $< -o $@

$(BUILD)/bench/%: bench/%.c $(BENCH_COMMON_OBJS) $(wildcard bench/*.h) $(BUILD)/libweft.a include/weft.h
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) $< $(BENCH_COMMON_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)

$(BUILD)/tests/bench/%: bench/%.c tests/bench/wrong_result.c $(BENCH_COMMON_OBJS) $(wildcard bench/*.h) \
  $(BUILD)/libweft.a include/weft.h
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) $< tests/bench/wrong_result.c $(BENCH_COMMON_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)

BENCH_EMU_DEPS := tests/bench/emu_install.c $(TEST_COMMON_OBJS) $(wildcard tests/common/*.h) $(BENCH_COMMON_OBJS) \
  $(wildcard bench/*.h) $(BUILD)/libweft.a include/weft.h
$(BUILD)/tests/bench/emu/%: bench/%.c $(BENCH_EMU_DEPS)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -Itests/common $< tests/bench/emu_install.c $(TEST_COMMON_OBJS) $(BENCH_COMMON_OBJS) \
	  -o $@ $(BUILD)/libweft.a $(LIBS)
$(BUILD)/tests/bench/emu-wrong/%: bench/%.c tests/bench/wrong_result.c $(BENCH_EMU_DEPS)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -Itests/common $< tests/bench/emu_install.c tests/bench/wrong_result.c \
	  $(TEST_COMMON_OBJS) $(BENCH_COMMON_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)

$(BUILD)/tools/%: tools/%.c $(BUILD)/libweft.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(BUILD)/libweft.a $(LIBS)

$(SIM_OBJS): OBJ_CFLAGS = -Ialgorithms -Itools/sim
$(SIM_OBJS): $(wildcard tools/sim/*.h)
$(BUILD)/tools/weft-sim: tools/weft-sim.c $(SIM_OBJS) $(BUILD)/libweft.a $(wildcard tools/sim/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itools/sim $< $(SIM_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)
$(BUILD)/tests/sim/%: tests/sim/%.c $(SIM_OBJS) $(BUILD)/libweft.a $(TEST_COMMON_OBJS) $(wildcard tools/sim/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common -Itools/sim $< $(SIM_OBJS) $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)

# docs/env.md's table, regenerated from lib/params.def (tests/unit/test_settings.c compares).
env-doc: $(BUILD)/tools/weft-info
	$(BUILD)/tools/weft-info --env-md > $(BUILD)/env-table.md
	awk -v table=$(BUILD)/env-table.md '/^<!-- end of the generated table -->/ { skip = 0 } \
	  !skip { print } /^<!-- weft-info --env-md: generated, do not edit -->/ { \
	  while ((getline line < table) > 0) print line; skip = 1 }' docs/env.md > $(BUILD)/env.md
	mv $(BUILD)/env.md docs/env.md

$(BUILD)/examples/%: docs/examples/%.c $(BUILD)/libweft.a include/weft.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -o $@ $(BUILD)/libweft.a $(LIBS)

$(BUILD)/tests/unit/%: tests/unit/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/transport/%: tests/transport/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/coll/%: tests/coll/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/net/%: tests/net/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/fault/%: tests/fault/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS) $(FAULT_HELPERS) $(wildcard tests/fault/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common -Itests/fault $< $(FAULT_HELPERS) $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/tools/%: tests/tools/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)
$(BUILD)/tests/tsan/%: tests/tsan/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(BUILD)/libweft.a $(TEST_COMMON_OBJS)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON_OBJS) -o $@ $(BUILD)/libweft.a $(LIBS)

# The main job: AllReduce benchmark with 4 ranks (processes) on this host, results checked.
bench: $(DEPS_STAMP)
	$(MAKE) benches
	mpirun --allow-run-as-root --oversubscribe -np 4 $(BUILD)/bench/allreduce_perf -b 8 -e 64M -f 4 -c 1

check: $(DEPS_STAMP)
	$(MAKE) all
	tests/run-all.sh $(BUILD)

# The verbs tests on Soft-RoCE in a QEMU VM (tests/rdma/check-rdma.sh; skipped with the
# reason where QEMU cannot run). tests/run-all.sh runs it as part of make check.
check-rdma: $(DEPS_STAMP)
	$(MAKE) all
	tests/rdma/check-rdma.sh $(BUILD)

# Only the layering rule (make check runs it too): calls in libweft run one way, from the API
# down to the leaf services (tests/tools/layering.py, docs/architecture.md "Layers").
check-layering: lib
	tests/tools/layering.py $(BUILD)

# ---- Sanitizers and fuzzing: each in its own build tree, never mixed with $(BUILD) ----

# libFuzzer targets (tests/fuzz/*.c) for every parser of bytes from outside, with ASan + UBSan.
# Each runs FUZZ_SECONDS from its seed corpus (tests/fuzz/corpus/<target>/); what it learns
# goes to build-fuzz/corpus/<target>/, a crash to build-fuzz/crash-<target>-*.
FUZZ_BUILD := build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 30
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
  -pthread -Iinclude -Ilib -Itransports $(HWLOC_CFLAGS) $(SODIUM_CFLAGS)
FUZZ_SRCS := $(filter-out $(if $(VERBS_LIBS),,tests/fuzz/fuzz_verbs_wire.c),$(wildcard tests/fuzz/*.c))
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(FUZZ_BUILD)/%,$(FUZZ_SRCS))
# CPU-only, whatever this build has: the fuzz targets parse bytes, and ASan and CUDA's
# runtime do not mix (FUZZ_CFLAGS has no WEFT_HAVE_CUDA, so lib/device.c has no runtime).
FUZZ_LIB_OBJS := $(patsubst %.c,$(FUZZ_BUILD)/%.o,$(filter-out devices/%,$(LIB_SRCS)))
FUZZ_LIBS := $(filter-out $(CUDA_LIBS),$(LIBS))

$(FUZZ_BUILD)/%.o: %.c $(wildcard include/*.h lib/*.h lib/*.def transports/*/*.h algorithms/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_BUILD)/libweft.a: $(FUZZ_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_BUILD)/libweft.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< -o $@ $(FUZZ_BUILD)/libweft.a $(FUZZ_LIBS)

# weft-sim's fabric parser is a tool's, not the library's: its target links tools/sim's files.
FUZZ_SIM_OBJS := $(patsubst %.c,$(FUZZ_BUILD)/%.o,tools/sim/fabric.c tools/sim/fabric_path.c)
$(FUZZ_SIM_OBJS): FUZZ_CFLAGS += -Ialgorithms -Itools/sim
$(FUZZ_BUILD)/fuzz_fabric: tests/fuzz/fuzz_fabric.c tests/fuzz/fuzz_common.h $(FUZZ_SIM_OBJS) $(FUZZ_BUILD)/libweft.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Ialgorithms -Itools/sim -fsanitize=fuzzer $< -o $@ $(FUZZ_SIM_OBJS) \
	  $(FUZZ_BUILD)/libweft.a $(FUZZ_LIBS)

fuzz-build: $(FUZZ_BINS)
fuzz: fuzz-build
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_BINS)

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer (leaks detected), and the
# multi-threaded paths under ThreadSanitizer (Criterion cannot start under TSan): see
# tests/run-sanitizer.sh for what each runs.
SAN_COMMON := -O1 -g -fno-omit-frame-pointer
check-asan: $(DEPS_STAMP)
	$(MAKE) BUILD=build-asan DEPS_STAMP=$(DEPS_STAMP) WITH_CUDA=no \
	  CFLAGS="$(SAN_COMMON) -fsanitize=address,undefined -fno-sanitize-recover=undefined" all
	tests/run-sanitizer.sh asan build-asan
check-tsan: $(DEPS_STAMP)
	$(MAKE) BUILD=build-tsan DEPS_STAMP=$(DEPS_STAMP) WITH_UCX=no WITH_CUDA=no CFLAGS="$(SAN_COMMON) -fsanitize=thread" \
	  build-tsan/bench/allreduce_perf build-tsan/tests/tsan/tsan_paths build-tsan/tests/tools/caps
	tests/run-sanitizer.sh tsan build-tsan

# PREFIX, LIBDIR, INCLUDEDIR, BINDIR as a distribution sets them; DESTDIR stages a package.
INSTALLED := $(LIBDIR)/$(SOFILE) $(LIBDIR)/$(SONAME) $(LIBDIR)/libweft.so $(LIBDIR)/libweft.a \
  $(INCLUDEDIR)/weft.h $(LIBDIR)/pkgconfig/weft.pc $(patsubst $(BUILD)/tools/%,$(BINDIR)/%,$(TOOL_BINS)) \
  $(patsubst tools/sim/fabrics/%,$(DATADIR)/weft/fabrics/%,$(SIM_FABRICS)) $(BINDIR)/weft-sim-plot
install: lib tools install-pytorch
	install -d $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(BINDIR)
	install -m 755 $(TOOL_BINS) $(DESTDIR)$(BINDIR)/
	install -d $(DESTDIR)$(DATADIR)/weft/fabrics
	install -m 644 $(SIM_FABRICS) $(DESTDIR)$(DATADIR)/weft/fabrics/
	install -m 755 tools/sim/weft-sim-plot.py $(DESTDIR)$(BINDIR)/weft-sim-plot
	install -m 755 $(BUILD)/$(SOFILE) $(DESTDIR)$(LIBDIR)/$(SOFILE)
	ln -sf $(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libweft.so
	install -m 644 $(BUILD)/libweft.a $(DESTDIR)$(LIBDIR)/libweft.a
	install -m 644 include/weft.h $(DESTDIR)$(INCLUDEDIR)/weft.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	  -e 's|@VERSION@|$(VERSION)|g' -e 's|@UCX_LIBS@|$(UCX_LIBS)|g' -e 's|@VERBS_LIBS@|$(VERBS_LIBS)|g' \
	  -e 's|@CUDA_LIBS@|$(CUDA_PC_LIBS)|g' weft.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/weft.pc
uninstall: uninstall-pytorch
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) build-asan build-tsan
