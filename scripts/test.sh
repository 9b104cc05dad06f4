#!/usr/bin/env bash
# Runs the whole test suite, as CI does:
#   1. installs missing dependencies (scripts/deps.sh),
#   2. builds the regular and the sanitizer (ASan + UBSan) builds,
#   3. starts a private stack (PostgreSQL, Redis, Kafka) on its own ports and
#      directory, so that it runs beside a developer's stack,
#   4. runs every ctest test (unit and integration) in both builds, and the fuzzers
#      briefly when a clang build is available,
#   5. always stops that stack and removes its directory, also on failure.
#
#   scripts/test.sh                 everything (what CI runs)
#   scripts/test.sh --quick         release build only: no sanitizer build, no fuzzers
#   scripts/test.sh [--quick] REGEX only the ctest entries whose name matches REGEX
#                                   (ctest -R), e.g. scripts/test.sh --quick '^test_api$'
#
# Environment: STRAND_TEST_PG_PORT (25432), STRAND_TEST_REDIS_PORT (26379),
# STRAND_TEST_KAFKA_PORT (29092), STRAND_TEST_PORT_BASE (18080: service HTTP ports).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
started=$SECONDS

quick=0
filter=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "test.sh: unknown option $arg (try --help)" >&2; exit 2 ;;
    *) [ ${#filter[@]} -eq 0 ] || { echo "test.sh: one filter only" >&2; exit 2; }
       filter=(-R "$arg") ;;
  esac
done

scripts/deps.sh
scripts/build.sh release
[ $quick -eq 1 ] || scripts/build.sh asan

export STRAND_STACK_DIR
STRAND_STACK_DIR=$(mktemp -d /tmp/strand-test-stack.XXXXXX)
chmod 755 "$STRAND_STACK_DIR"
export STRAND_PG_PORT=${STRAND_TEST_PG_PORT:-25432}
export STRAND_REDIS_PORT=${STRAND_TEST_REDIS_PORT:-26379}
export STRAND_KAFKA_PORT=${STRAND_TEST_KAFKA_PORT:-29092}
cleanup() {
  scripts/stack.sh stop || true
  rm -rf "$STRAND_STACK_DIR"
}
trap cleanup EXIT
scripts/stack.sh start
eval "$(scripts/stack.sh env)"
# Each build's pass logs into its own directory: the sanitizer pass reruns the same
# tests, and one directory would keep only its logs, not those of a failed release run.
logs=$STRAND_STACK_DIR/logs
mkdir -p "$logs/release" "$logs/asan"
failed_logs=()

# Prints the sanitizer reports (ASan, LeakSanitizer, UBSan) in the service logs of a
# directory; returns 1 if there is one, 0 if none. The harness already fails a program
# on its own services' reports; this looks once more over the whole pass, for what no
# program saw. UBSan's "runtime error:" counts only outside the services' JSON lines.
check_sanitizer_reports() {
  local f hits first found=0
  for f in "$1"/*.log; do
    [ -f "$f" ] || continue
    hits=$( { grep -nE '(ERROR|SUMMARY): (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)' "$f"
              grep -nE 'runtime error:' "$f" | grep -vE '^[0-9]+:\{'; } | sort -n -u -t: -k1,1 || true)
    [ -n "$hits" ] || continue
    found=1
    first=${hits%%:*}
    echo "---- sanitizer report in $f ($(printf '%s\n' "$hits" | wc -l) report lines):"
    sed -n "$(( first > 1 ? first - 1 : 1 )),$(( first + 120 ))p" "$f"
  done
  return $found
}

rc=0
if [ ${#filter[@]} -eq 0 ]; then
  echo "== deploy manifests, Dockerfile, dashboard and alert rules (offline)"
  scripts/check_deploy.sh || rc=1
fi
echo "== tests: release build"
STRAND_TEST_LOG_DIR=$logs/release ctest --test-dir build --output-on-failure --timeout 900 "${filter[@]}" ||
  { rc=1; failed_logs+=("$logs/release"); }
if [ $quick -eq 0 ]; then
  echo "== tests: ASan + UBSan build"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    STRAND_TEST_PORT_BASE=$(( ${STRAND_TEST_PORT_BASE:-18080} + 10 )) STRAND_TEST_LOG_DIR=$logs/asan \
    ctest --test-dir build-asan --output-on-failure --timeout 900 "${filter[@]}" ||
    { rc=1; failed_logs+=("$logs/asan"); }
  echo "== sanitizer reports in the service logs of the ASan + UBSan pass"
  if check_sanitizer_reports "$logs/asan"; then
    echo "none"
  else
    rc=1
    [[ " ${failed_logs[*]} " == *" $logs/asan "* ]] || failed_logs+=("$logs/asan")
  fi
fi
if [ $quick -eq 0 ] && [ ${#filter[@]} -eq 0 ] && [ -x scripts/fuzz.sh ]; then
  echo "== fuzzers (brief)"
  scripts/fuzz.sh 20 || rc=1
fi
if [ $rc -ne 0 ]; then
  echo "== server logs in $logs and service logs of the failed passes in ${failed_logs[*]:-(none)}:"
  for f in "$logs"/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }; done
  for d in "${failed_logs[@]}"; do
    for f in "$d"/*.log; do [ -f "$f" ] && { echo "---- $f"; tail -n 40 "$f"; }; done
  done
fi
echo "== tests finished in $((SECONDS - started)) s: $([ $rc -eq 0 ] && echo PASSED || echo FAILED)"
exit $rc
