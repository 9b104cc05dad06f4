#!/usr/bin/env bash
# Configures and builds Strand into a build directory.
#   scripts/build.sh [release|asan|fuzz|fuzzcov]     (default: release)
# release -> build/, asan -> build-asan/ (ASan + UBSan), fuzz -> build-fuzz/ (clang,
# libFuzzer harnesses), fuzzcov -> build-fuzzcov/ (the harnesses with llvm source-based
# coverage, for scripts/fuzz_long.sh). Re-running only rebuilds what changed.
#
# release and asan are the test builds: they compile in the named crash points
# (-DSTRAND_CRASH_POINTS=ON, libs/common crash_point.h; test_crash_points drives them).
# STRAND_CRASH_POINTS=OFF builds without them; that is also the default in a source
# tree without .git (the Docker build context, whose .dockerignore drops .git/), so the
# image's binaries never carry them.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-release}
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
crash_default=ON
[ -e "$repo/.git" ] || crash_default=OFF
crash=${STRAND_CRASH_POINTS:-$crash_default}
case "$crash" in
  ON|OFF) ;;
  *) echo "$0: STRAND_CRASH_POINTS must be ON or OFF, not '$crash'" >&2; exit 2 ;;
esac
case "$flavour" in
  release) dir=$repo/build; opts=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRAND_CRASH_POINTS=$crash) ;;
  asan)    dir=$repo/build-asan; opts=(-DCMAKE_BUILD_TYPE=Debug -DSTRAND_SANITIZE=ON -DSTRAND_CRASH_POINTS=$crash) ;;
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
elif [ "$flavour" = release ] || [ "$flavour" = asan ]; then
  # Configured again (cheap when nothing changed): a build directory made before
  # STRAND_CRASH_POINTS existed, or with the other value, gets the one asked for.
  cmake -S "$repo" -B "$dir" "${opts[@]}" >/dev/null
fi
cmake --build "$dir" -j "$(nproc)"
