#!/usr/bin/env bash
# Long fuzzing with a coverage report: runs every libFuzzer harness for MINUTES each
# (default 10) on a corpus kept between runs, then measures the line and branch
# coverage that corpus reaches in the sources each harness exercises.
#
#   scripts/fuzz_long.sh [MINUTES] [HARNESS...]     e.g. scripts/fuzz_long.sh 2 fuzz_expr
#   (MINUTES may also be given in seconds with an s suffix: 30s)
#   scripts/fuzz_long.sh --coverage-only [HARNESS...]   measure the kept corpus again
#
# - Fuzzing uses the sanitizer build (scripts/build.sh fuzz, build-fuzz/); the corpus
#   grows in build-fuzz/corpus-long/<harness>/, seeded from tests/fuzz/corpus/.
#   A finding fails the run; the crashing input is kept in build-fuzz/findings/.
# - Coverage uses a second build without sanitizers (scripts/build.sh fuzzcov,
#   build-fuzzcov/): each harness replays its corpus once (-runs=0) and llvm-cov
#   reports on libs/ and services/ (the harness file itself left out).
# - The summary (CPU minutes, executions, corpus size, coverage per harness) is printed
#   and written to build-fuzz/fuzz_long.md, ready for docs/security.md.
# CI runs the short version (scripts/fuzz.sh from scripts/test.sh), not this.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
coverage_only=0
if [ "${1:-}" = --coverage-only ]; then coverage_only=1; minutes=1; shift; else minutes=${1:-10}; shift || true; fi
case "$minutes" in *s) seconds=${minutes%s} ;; *) seconds=$minutes ;; esac
case "$seconds" in
  ''|*[!0-9]*|0) echo "fuzz_long: MINUTES must be a positive whole number (or seconds: 30s)" >&2; exit 2 ;;
esac
case "$minutes" in *s) ;; *) seconds=$((minutes * 60)) ;; esac

llvm_tool() { # the newest versioned llvm tool on the machine
  local t
  for t in "$1" "$1"-{19,18,17,16,15,14}; do command -v "$t" >/dev/null && { echo "$t"; return; }; done
  for t in /usr/lib/llvm-*/bin/"$1"; do [ -x "$t" ] && { echo "$t"; return; }; done
  echo "fuzz_long: $1 not found (Debian: apt-get install llvm)" >&2; exit 1
}
profdata=$(llvm_tool llvm-profdata)
llvmcov=$(llvm_tool llvm-cov)

scripts/build.sh fuzz >/dev/null
scripts/build.sh fuzzcov >/dev/null

harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  for bin in build-fuzz/tests/fuzz/fuzz_*; do [ -x "$bin" ] && harnesses+=("$(basename "$bin")"); done
fi
findings=$repo/build-fuzz/findings
report=$repo/build-fuzz/fuzz_long.md
mkdir -p "$findings"
rc=0
{
  echo "| harness | CPU minutes | executions | corpus files | lines covered (all linked code) | lines covered (files it reaches) | branches covered (all linked code) |"
  echo "|---|---|---|---|---|---|---|"
} >"$report"
for name in "${harnesses[@]}"; do
  bin=build-fuzz/tests/fuzz/$name
  covbin=build-fuzzcov/tests/fuzz/$name
  [ -x "$bin" ] && [ -x "$covbin" ] || { echo "fuzz_long: no harness $name" >&2; exit 2; }
  corpus=build-fuzz/corpus-long/$name
  mkdir -p "$corpus"
  seeds=tests/fuzz/corpus/${name#fuzz_}
  [ -d "$seeds" ] && cp -rn "$seeds"/. "$corpus"/
  log=$findings/$name-long.log
  t0=$(awk '{print $16+$17}' /proc/$$/stat)   # CPU ticks of this shell's reaped children
  start=$SECONDS
  if [ $coverage_only -eq 1 ]; then
    outcome="coverage only"; : >"$log"
  elif "$bin" -max_total_time=$seconds -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
       -artifact_prefix="$findings/$name-" "$corpus" >"$log" 2>&1; then
    outcome="no findings"
  else
    outcome="FINDING (see $log)"; rc=1
  fi
  t1=$(awk '{print $16+$17}' /proc/$$/stat)
  cpu_min=$(awk -v t="$t1" -v t0="$t0" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.1f", (t-t0)/hz/60}')
  execs=$(grep -Eo 'Done [0-9]+ runs' "$log" | tail -1 | grep -Eo '[0-9]+' || echo "?")
  files=$(find "$corpus" -type f | wc -l)
  # Coverage of the corpus, without sanitizers.
  profraw=$(mktemp -d)
  LLVM_PROFILE_FILE="$profraw/%p.profraw" "$covbin" -runs=0 "$corpus" >/dev/null 2>&1 || true
  "$profdata" merge -sparse "$profraw"/*.profraw -o "$profraw/merged.profdata"
  per_file=$("$llvmcov" report "$covbin" -instr-profile="$profraw/merged.profdata" \
             -ignore-filename-regex='tests/|build-|/usr/')
  rm -rf "$profraw"
  # columns: file regions missed cover% functions missed exec% lines missed cover% branches missed cover%
  totals=$(echo "$per_file" | awk '/^TOTAL/{print}')
  lines=$(echo "$totals" | awk '{print $10 " of " $8}')
  branches=$(echo "$totals" | awk '{print $13 " of " $11}')
  reached=$(echo "$per_file" | awk '$1 ~ /\.c$/ && $9 < $8 {n += $8; m += $9; f++}
             END {if (n) printf "%.2f%% of %d in %d files", 100 * (n - m) / n, n, f; else print "none"}')
  echo "fuzz_long: $name: $((SECONDS - start)) s, $execs runs, $files corpus files, lines $lines ($reached), branches $branches, $outcome"
  echo "| $name | $cpu_min | $execs | $files | $lines | $reached | $branches |" >>"$report"
done
echo "fuzz_long: summary in $report"
cat "$report"
exit $rc
