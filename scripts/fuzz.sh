#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang) and runs each for a bounded time on a copy of
# its seed corpus (tests/fuzz/corpus/<name without fuzz_>/). Fails on any finding;
# the crashing input is kept in build-fuzz/findings/.
#   scripts/fuzz.sh [SECONDS_PER_HARNESS]     (default 30)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
secs=${1:-30}
if ! build_log=$(scripts/build.sh fuzz 2>&1); then
  echo "fuzz: the clang build failed:"; echo "$build_log" | grep -E 'error|FAILED' | head -n 40
  exit 1
fi
findings=$repo/build-fuzz/findings
mkdir -p "$findings"
rc=0
for bin in build-fuzz/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus=$(mktemp -d)
  seeds=tests/fuzz/corpus/${name#fuzz_}
  [ -d "$seeds" ] && cp -r "$seeds"/. "$corpus"/
  if "$bin" -max_total_time="$secs" -max_len=4096 -timeout=10 -artifact_prefix="$findings/$name-" \
       "$corpus" >"$findings/$name.log" 2>&1; then
    echo "fuzz: $name: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$findings/$name.log" | tail -1), no findings"
  else
    echo "fuzz: $name: FINDING (see $findings/$name.log)"; tail -n 30 "$findings/$name.log"; rc=1
  fi
  rm -rf "$corpus"
done
exit $rc
