#!/bin/bash
# The library as a distribution ships it (make check runs this):
#  - libweft.so exports exactly the functions include/weft.h declares and their pweft aliases;
#  - it carries the SONAME libweft.so.<major>, beside libweft.so.<version> and two links;
#  - make install DESTDIR=... PREFIX=/usr stages that layout, weft.h and weft.pc; a program
#    built with pkg-config against the staged files runs and gets exact results, even when it
#    defines functions with NCCL-shaped weft names (weftReduce), and a profiler that defines
#    weftAllReduce reaches the library's through pweftAllReduce;
#  - the installed weft-info prints the banner, the transports, the algorithms and every
#    parameter, and exits 1 on a value the library refuses; the installed weft-topo prints
#    this host and a 2 x 2 job;
#  - make uninstall DESTDIR=... removes every file install put there.
# Usage: tests/pkg/run.sh BUILD (run from the repository root). Exits 0 when all hold.
set -u
BUILD=${1:-build}
fails=0
fail() { echo "pkg: FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "pkg: ok: $*"; }
stage=$(mktemp -d /tmp/weft-pkg-XXXXXX)
trap 'rm -rf "$stage"' EXIT

declared=$(sed -n 's/^WEFT_API [^(]*[ *]\(weft[A-Za-z0-9_]*\)(.*/\1/p' include/weft.h | sort)
expected=$(printf '%s\n' $declared $(sed 's/^/p/' <<<"$declared") | sort)
exported=$(nm -D --defined-only "$BUILD/libweft.so" | awk '{print $3}' | sort)
if [ "$(wc -l <<<"$declared")" -lt 10 ]; then
  fail "found only $(wc -l <<<"$declared") declarations in include/weft.h"
elif [ "$expected" != "$exported" ]; then
  fail "exported symbols differ from weft.h's functions (< declared only, > exported only):"
  diff <(echo "$expected") <(echo "$exported") | grep '^[<>]'
else
  ok "libweft.so exports the $(wc -l <<<"$declared") functions of weft.h and their pweft aliases, nothing else"
fi

version=$(sed -n 's/^#define WEFT_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/weft.h | paste -sd.)
major=${version%%.*}
soname=$(readelf -d "$BUILD/libweft.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libweft.so.$major" ] && ok "SONAME $soname" || fail "SONAME '$soname', want libweft.so.$major"

if ! make -s install DESTDIR="$stage" PREFIX=/usr BUILD="$BUILD" >"$stage.log" 2>&1; then
  fail "make install DESTDIR=$stage PREFIX=/usr: $(tail -3 "$stage.log")"
fi
rm -f "$stage.log"
lib=$stage/usr/lib
[ -f "$lib/libweft.so.$version" ] && [ ! -L "$lib/libweft.so.$version" ] || fail "no file $lib/libweft.so.$version"
[ "$(readlink "$lib/libweft.so.$major")" = "libweft.so.$version" ] || fail "libweft.so.$major does not link to libweft.so.$version"
[ "$(readlink "$lib/libweft.so")" = "libweft.so.$major" ] || fail "libweft.so does not link to libweft.so.$major"
for f in "$lib/libweft.a" "$stage/usr/include/weft.h" "$lib/pkgconfig/weft.pc"; do
  [ -f "$f" ] || fail "make install left no $f"
done
grep -qx "libdir=/usr/lib" "$lib/pkgconfig/weft.pc" || fail "weft.pc: $(grep libdir= "$lib/pkgconfig/weft.pc")"
grep -qx "Version: $version" "$lib/pkgconfig/weft.pc" || fail "weft.pc has no 'Version: $version'"

info=$stage/usr/bin/weft-info
if [ ! -x "$info" ]; then
  fail "make install left no $info"
else
  out=$("$info" 2>&1); rc=$?
  [ $rc -eq 0 ] || fail "weft-info exited $rc: $out"
  grep -q "^weft $version (git " <<<"$out" || fail "weft-info prints no version banner: $(head -1 <<<"$out")"
  for word in "shm      can run here" "tcp      can run here" "ring     AllReduce" "hier     AllReduce"; do
    grep -qF "$word" <<<"$out" || fail "weft-info lacks \"$word\""
  done
  for var in $("$info" --env-md | sed -n 's/^| `\(WEFT_[A-Z0-9_]*\)`.*/\1/p'); do
    grep -q "^  $var = " <<<"$out" || fail "weft-info does not list $var"
  done
  out=$(WEFT_TIMEOUT_MS=30s "$info" -p 2>&1); rc=$?
  [ $rc -eq 1 ] && grep -q 'WEFT_TIMEOUT_MS = "30s" (environment; default 300000)  NOT ALLOWED' <<<"$out" \
    && ok "weft-info lists transports, algorithms and every parameter, and flags a refused value" \
    || fail "weft-info -p with WEFT_TIMEOUT_MS=30s: exit $rc: $(grep WEFT_TIMEOUT_MS <<<"$out")"
fi

topo=$stage/usr/bin/weft-topo
if [ ! -x "$topo" ]; then
  fail "make install left no $topo"
else
  out=$("$topo" --hosts 2 --ranks-per-host 2 2>&1); rc=$?
  [ $rc -eq 0 ] && grep -q "^Host (detected by hwloc): " <<<"$out" && grep -q "^Ring (" <<<"$out" \
    && grep -q "^Predicted AllReduce time" <<<"$out" \
    && ok "weft-topo prints this host, a 2 x 2 job's ring and the predicted times" \
    || fail "weft-topo --hosts 2 --ranks-per-host 2: exit $rc: $out"
fi

export PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_LIBDIR=$lib/pkgconfig
flags=$(pkg-config --cflags --libs weft) || fail "pkg-config --cflags --libs weft"
for variant in plain profiler; do
  def=; [ $variant = profiler ] && def=-DPROFILER
  bin=$stage/consumer-$variant
  if ! ${CC:-cc} -std=c11 -Wall -Wextra -Werror $def tests/pkg/consumer.c $flags -pthread -o "$bin"; then
    fail "building tests/pkg/consumer.c ($variant) with pkg-config's flags"; continue
  fi
  needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(libweft.*\)\]/\1/p')
  [ "$needed" = "libweft.so.$major" ] || fail "consumer-$variant needs '$needed', want libweft.so.$major"
  for algo in direct ring tree; do
    if out=$(WEFT_ALGO=$algo LD_LIBRARY_PATH=$lib timeout 60 "$bin" 2>&1); then
      ok "consumer-$variant WEFT_ALGO=$algo: $out"
    else
      fail "consumer-$variant WEFT_ALGO=$algo: $out"
    fi
  done
done

if ! make -s uninstall DESTDIR="$stage" PREFIX=/usr BUILD="$BUILD" >/dev/null 2>&1; then
  fail "make uninstall DESTDIR=$stage PREFIX=/usr"
fi
left=$(cd "$stage" && find usr \( -type f -o -type l \) 2>/dev/null)
[ -z "$left" ] && ok "make uninstall removed every installed file" || fail "make uninstall left: $left"

[ "$fails" -eq 0 ] && echo "pkg: all passed" || echo "pkg: $fails failed"
[ "$fails" -eq 0 ]
