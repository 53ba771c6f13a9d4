# weft: `make` builds the libraries, the benchmarks and the tests; `make bench` and
# `make check` also install what a fresh Debian machine is missing (install-deps.sh).
PREFIX ?= /usr/local
CC ?= gcc
MPICC ?= mpicc
BUILD := build
VERSION := 0.1.0

HWLOC_CFLAGS := $(shell pkg-config --cflags hwloc 2>/dev/null)
HWLOC_LIBS := $(shell pkg-config --libs hwloc 2>/dev/null || echo -lhwloc)

WARN := -Wall -Wextra -Werror
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -fPIC -pthread -Iinclude -Ilib $(HWLOC_CFLAGS)
LIBS := $(HWLOC_LIBS) -lpthread -lm -lrt

LIB_SRCS := $(wildcard lib/*.c) $(wildcard transports/*/*.c) $(wildcard algorithms/*.c)
LIB_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRCS))
UNIT_SRCS := $(wildcard tests/unit/*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRCS))
TRANSPORT_TEST_SRCS := $(wildcard tests/transport/*.c)
TRANSPORT_TEST_BINS := $(patsubst tests/transport/%.c,$(BUILD)/tests/transport/%,$(TRANSPORT_TEST_SRCS))
COLL_SRCS := $(wildcard tests/coll/*.c)
COLL_BINS := $(patsubst tests/coll/%.c,$(BUILD)/tests/coll/%,$(COLL_SRCS))
MPI_TEST_SRCS := $(wildcard tests/mpi/*.c)
MPI_TEST_BINS := $(patsubst tests/mpi/%.c,$(BUILD)/tests/mpi/%,$(MPI_TEST_SRCS))
TEST_COMMON := $(wildcard tests/common/*.c)
BENCH_BINS := $(BUILD)/bench/allreduce_perf $(BUILD)/bench/mpi_allreduce_perf

DEPS_STAMP := $(BUILD)/.deps-ok

.PHONY: all lib benches tests bench check deps install clean
all: lib benches tests
lib: $(BUILD)/libweft.so $(BUILD)/libweft.a
benches: $(BENCH_BINS)
tests: $(UNIT_BINS) $(TRANSPORT_TEST_BINS) $(COLL_BINS) $(MPI_TEST_BINS)

# Installs missing packages once per build tree (and again when install-deps.sh changes).
$(DEPS_STAMP): install-deps.sh
	./install-deps.sh
	@mkdir -p $(BUILD) && touch $@
deps: $(DEPS_STAMP)

$(BUILD)/%.o: %.c $(wildcard include/*.h lib/*.h lib/*.def transports/*/*.h algorithms/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libweft.so: $(LIB_OBJS)
	$(CC) -shared -o $@ $^ $(LIBS)
$(BUILD)/libweft.a: $(LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/bench/%: bench/%.c $(BUILD)/libweft.a include/weft.h
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) $< -o $@ $(BUILD)/libweft.a $(LIBS)

$(BUILD)/tests/unit/%: tests/unit/%.c $(BUILD)/libweft.a $(TEST_COMMON)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/transport/%: tests/transport/%.c $(BUILD)/libweft.a $(TEST_COMMON)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/coll/%: tests/coll/%.c $(BUILD)/libweft.a $(TEST_COMMON)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON) -o $@ $(BUILD)/libweft.a -lcriterion $(LIBS)
$(BUILD)/tests/mpi/%: tests/mpi/%.c $(BUILD)/libweft.a $(TEST_COMMON)
	@mkdir -p $(dir $@)
	OMPI_CC=$(CC) $(MPICC) $(ALL_CFLAGS) -Itests/common $< $(TEST_COMMON) -o $@ $(BUILD)/libweft.a $(LIBS)

# The main job: AllReduce benchmark with 4 ranks (processes) on this host, results checked.
bench: $(DEPS_STAMP)
	$(MAKE) benches
	mpirun --allow-run-as-root --oversubscribe -np 4 $(BUILD)/bench/allreduce_perf -b 8 -e 64M -f 4 -c 1

check: $(DEPS_STAMP)
	$(MAKE) all
	tests/run-all.sh $(BUILD)

install: lib
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 755 $(BUILD)/libweft.so $(DESTDIR)$(PREFIX)/lib/libweft.so
	install -m 644 $(BUILD)/libweft.a $(DESTDIR)$(PREFIX)/lib/libweft.a
	install -m 644 include/weft.h $(DESTDIR)$(PREFIX)/include/weft.h
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' weft.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/weft.pc

clean:
	rm -rf $(BUILD)
