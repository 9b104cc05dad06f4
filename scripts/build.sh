#!/usr/bin/env bash
# Configures and builds Strand into a build directory.
#   scripts/build.sh [release|asan|fuzz|fuzzcov]     (default: release)
# release -> build/, asan -> build-asan/ (ASan + UBSan), fuzz -> build-fuzz/ (clang,
# libFuzzer harnesses), fuzzcov -> build-fuzzcov/ (the harnesses with llvm source-based
# coverage, for scripts/fuzz_long.sh). Re-running only rebuilds what changed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-release}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
case "$flavour" in
  release) dir=$repo/build; opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo) ;;
  asan)    dir=$repo/build-asan; opts=(-DCMAKE_BUILD_TYPE=Debug -DSTRAND_SANITIZE=ON) ;;
  fuzz)    dir=$repo/build-fuzz; opts=(-DCMAKE_BUILD_TYPE=Debug -DSTRAND_FUZZ=ON -DCMAKE_C_COMPILER=clang) ;;
  fuzzcov) dir=$repo/build-fuzzcov; opts=(-DCMAKE_BUILD_TYPE=Debug -DSTRAND_FUZZ=ON -DSTRAND_FUZZ_COVERAGE=ON -DCMAKE_C_COMPILER=clang) ;;
  *) echo "usage: $0 [release|asan|fuzz|fuzzcov]" >&2; exit 2 ;;
esac
# The web console's pinned packages (web/package-lock.json), installed once and again
# whenever the lock file changes; strand-api's build bundles and embeds the console.
if [ ! -f "$repo/web/node_modules/.package-lock.json" ] ||
   [ "$repo/web/package-lock.json" -nt "$repo/web/node_modules/.package-lock.json" ]; then
  (cd "$repo/web" && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$repo" -B "$dir" "${gen[@]}" "${opts[@]}" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)"
