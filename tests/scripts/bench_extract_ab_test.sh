#!/usr/bin/env bash
# scripts/bench_extract_ab.sh: alternates the binaries it is given (one line per binary per
# run, each with every size's integral and pyramid figures), reports warm or fresh gazes,
# and refuses anything that is not an executable, naming it.
#   bench_extract_ab_test.sh BENCH_EXTRACT SCRIPT
set -uo pipefail
bench=$1 script=$2
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(SACCADE_AB_RUNS=2 SACCADE_AB_SIZES=256,512 bash "$script" "$bench" "$bench") ||
  fail "two runs of the same binary exited $?"
[[ $(head -1 <<<"$out") == "# fresh gazes"* ]] || fail "header does not say fresh: $out"
lines=$(grep -c " run [12]:" <<<"$out")
[[ $lines == 4 ]] || fail "want 4 lines (2 binaries x 2 runs), got $lines: $out"
while read -r line; do
  # "<bin> run N:  256^2 I P  512^2 I P": every figure a positive number.
  read -r -a f <<<"${line#*:}"
  [[ ${#f[@]} == 6 && ${f[0]} == "256^2" && ${f[3]} == "512^2" ]] || fail "bad line: $line"
  for v in "${f[1]}" "${f[2]}" "${f[4]}" "${f[5]}"; do
    awk -v v="$v" 'BEGIN {exit !(v + 0 > 0)}' || fail "not a positive figure '$v' in: $line"
  done
done < <(grep " run [12]:" <<<"$out")

warm=$(SACCADE_AB_RUNS=1 SACCADE_AB_WARM=1 SACCADE_AB_SIZES=256 bash "$script" "$bench" "$bench") ||
  fail "warm run exited $?"
[[ $(head -1 <<<"$warm") == "# warm gazes"* ]] || fail "header does not say warm: $warm"

err=$(bash "$script" "$bench" /no/such/bench 2>&1)
rc=$?
[[ $rc == 2 && $err == *"'/no/such/bench' is not an executable"* ]] ||
  fail "a missing binary: rc $rc, '$err'"
err=$(bash "$script" "$bench" 2>&1)
rc=$?
[[ $rc == 2 && $err == *usage* ]] || fail "one binary: rc $rc, '$err'"
echo "PASS"
