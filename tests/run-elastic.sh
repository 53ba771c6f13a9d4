#!/bin/bash
# Runs docs/examples/elastic.c as the documentation shows it: 4 processes meeting through
# WEFT_COMM_ID; once with no failure, then with one rank killed mid-training (each rank in
# turn as the victim, at a random step). Every survivor must finish and print the checksum of
# the run without failure. Usage: tests/run-elastic.sh BIN
set -u
BIN=$1
N=4
port() { echo $((20000 + RANDOM % 20000)); }
run() { # run NAME [DIE_RANK DIE_STEP]: prints the survivors' checksums, one per line
  local out=$(mktemp -d) pids=() p=$(port)
  for ((r = 0; r < N; r++)); do
    WEFT_COMM_ID=127.0.0.1:$p WEFT_COMM_SECRET=elastic-$$ WEFT_TIMEOUT_MS=20000 \
      timeout 120 "$BIN" $N $r "${@:2}" >"$out/$r.out" 2>"$out/$r.err" &
    pids+=($!)
  done
  local fail=0
  for ((r = 0; r < N; r++)); do wait "${pids[r]}" || [ "${2:-x}" = "$r" ] || { fail=1; echo "$1: rank $r exited $?" >&2; cat "$out/$r.err" >&2; }; done
  cat "$out"/*.out | sed 's/.*checksum //'
  rm -rf "$out"
  return $fail
}
ref=$(run clean | sort -u)
[ "$(wc -l <<<"$ref")" = 1 ] && [ -n "$ref" ] || { echo "FAIL: clean run checksums: $ref"; exit 1; }
echo "clean run: every rank checksum $ref"
for ((victim = 0; victim < N; victim++)); do
  step=$((1 + RANDOM % 18))
  sums=$(run "victim $victim" "$victim" "$step") || { echo "FAIL: a survivor failed (victim $victim, step $step)"; exit 1; }
  count=$(grep -c . <<<"$sums")
  if [ "$count" != $((N - 1)) ] || [ "$(sort -u <<<"$sums")" != "$ref" ]; then
    echo "FAIL: victim $victim at step $step: survivors printed: $sums"; exit 1
  fi
  echo "rank $victim killed at step $step: the $count survivors recovered and match"
done
