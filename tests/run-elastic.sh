#!/bin/bash
# Runs docs/examples/elastic.c as the documentation shows it: 4 processes meeting through
# WEFT_COMM_ID; once with no failure, then with one rank killed mid-training (each rank in turn
# as the victim; one of them at the first step, one at the last, the others at a random step).
# After a death the survivors recover, redo the step, and grow back to 4 ranks with a
# replacement process the example starts (it prints its checksum with the survivor that started
# it). Every rank checks each averaged gradient exactly against the gradients of that step's
# members (the example does); here every rank but the victim must exit 0 with a checksum (a
# survivor that started a replacement exits 0 only if the replacement did), the victim must die
# of its SIGKILL, the 3 survivors' and the replacement's checksums must be equal, and a run with
# a death must end with other weights than the clean run (the gradients differ per rank, so a
# death that changed nothing would mean the AllReduce ignored someone). Usage:
# tests/run-elastic.sh BIN
set -u
BIN=$1
N=4
STEPS=20 # as in docs/examples/elastic.c
port() { echo $((20000 + RANDOM % 20000)); }

# run NAME [DIE_RANK DIE_STEP]: prints the checksums of the ranks that finished, one per line,
# a replacement's prefixed "replacement ";
# returns 1 if a rank other than the victim failed, or the victim did not die of SIGKILL.
run() {
  local name=$1 victim=${2:--1} out pids=() p rc r fail=0
  out=$(mktemp -d) p=$(port)
  for ((r = 0; r < N; r++)); do
    WEFT_COMM_ID=127.0.0.1:$p WEFT_COMM_SECRET=elastic-$$ WEFT_TIMEOUT_MS=20000 \
      timeout 120 "$BIN" $N $r "${@:2}" >"$out/$r.out" 2>"$out/$r.err" &
    pids+=($!)
  done
  for ((r = 0; r < N; r++)); do
    wait "${pids[r]}"
    rc=$?
    if [ "$r" = "$victim" ]; then
      [ "$rc" = 137 ] && continue # 128 + SIGKILL
      echo "$name: the victim, rank $r, exited $rc instead of dying of SIGKILL" >&2
    elif [ "$rc" = 0 ] && grep -q "$STEPS steps checked, checksum" "$out/$r.out"; then
      continue
    else
      echo "$name: rank $r exited $rc" >&2
    fi
    fail=1
    cat "$out/$r.out" "$out/$r.err" >&2
  done
  sed -n -E 's/^rank [0-9]+ \((replacement), .*checksum ([0-9a-f]+)$/\1 \2/p; t; s/.*checksum //p' "$out"/*.out
  rm -rf "$out"
  return $fail
}

sums=$(run clean) || { echo "FAIL: clean run"; exit 1; }
ref=$(sort -u <<<"$sums")
if [ "$(grep -c . <<<"$sums")" != $N ] || [ "$(grep -c . <<<"$ref")" != 1 ]; then
  echo "FAIL: clean run: $N equal checksums expected, got: $sums"; exit 1
fi
echo "clean run: every rank checksum $ref"
first=$((RANDOM % N))
for ((k = 0; k < N; k++)); do
  victim=$(((first + k) % N))
  case $k in
    0) step=0 ;;
    1) step=$((STEPS - 1)) ;;
    *) step=$((RANDOM % STEPS)) ;;
  esac
  sums=$(run "victim $victim" "$victim" "$step") || { echo "FAIL: victim $victim, step $step"; exit 1; }
  count=$(grep -c . <<<"$sums")
  replacements=$(grep -c '^replacement ' <<<"$sums")
  mine=$(sed 's/^replacement //' <<<"$sums" | sort -u)
  if [ "$count" != $N ] || [ "$replacements" != 1 ] || [ "$(grep -c . <<<"$mine")" != 1 ]; then
    echo "FAIL: victim $victim at step $step: $((N - 1)) survivors and 1 replacement with equal checksums expected, got: $sums"; exit 1
  fi
  if [ "$mine" = "$ref" ]; then
    echo "FAIL: victim $victim at step $step: the survivors end as if nobody had died ($mine)"; exit 1
  fi
  echo "rank $victim killed at step $step: the $((N - 1)) survivors recovered, grew back to $N with a replacement, checked every step, and all agree ($mine)"
done
