#!/usr/bin/env bash
# The floor under Strand's W1: what PostgreSQL and the Kafka broker cost per W1 instance
# for the work the design requires of them, measured without any Strand service.
#   1. PostgreSQL: pgbench runs bench/floor/w1_db.sql (W1's start transaction and
#      wake-up, Strand's own statements, prepared and pipelined) at 16 clients, once as
#      fast as it goes and once at STRAND_FLOOR_RATE instances a second; PostgreSQL's CPU
#      time per instance from /proc (backends and the postmaster's reaped children).
#   2. Kafka: strand-kafka-floor sends W1's START-sized messages through the broker at
#      1,000 and STRAND_FLOOR_RATE messages a second with the relay's producer settings
#      and reads them back; the broker's CPU time per message.
# It uses a database of its own (strand_floor, created again each run, its schema put
# there by starting strand-api on it once) and a topic of its own (strand-floor), so
# services running on the same stack are not touched. Prints one line per measurement;
# docs/benchmarks.md ("The floor under W1") records them.
#
#   bench/floor.sh [BUILD_DIR]        (default build/; release)
#
# Environment: STRAND_FLOOR_N (10000 instances or messages per measurement),
# STRAND_FLOOR_RATE (1500), STRAND_BENCH_PORT_BASE (28180: strand-api's port while it
# migrates); the stack of scripts/stack.sh (started if not running).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
BUILD=$(cd "${1:-build}" && pwd)
N=${STRAND_FLOOR_N:-10000} RATE=${STRAND_FLOOR_RATE:-1500} PB=${STRAND_BENCH_PORT_BASE:-28180}
dir=${STRAND_STACK_DIR:-$repo/.stack}
[[ $N =~ ^[0-9]+$ ]] && [ "$N" -ge 32 ] ||
  { echo "floor: STRAND_FLOOR_N must be a whole number of at least 32 (16 clients, 2 instances a transaction), not '$N'" >&2; exit 2; }
[[ $RATE =~ ^[0-9]+$ ]] && [ "$RATE" -ge 2 ] ||
  { echo "floor: STRAND_FLOOR_RATE must be a whole number of at least 2, not '$RATE'" >&2; exit 2; }
scripts/stack.sh start >&2
eval "$(scripts/stack.sh env)"
pg_port=${STRAND_PG_PORT:-5432}
admin=(psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -qX -v ON_ERROR_STOP=1)
floor_dsn="host=127.0.0.1 port=$pg_port user=strand dbname=strand_floor"
hz=$(getconf CLK_TCK)

api=
cleanup() {
  [ -z "$api" ] || kill "$api" 2>/dev/null || true
  "${admin[@]}" -c "DROP DATABASE IF EXISTS strand_floor" 2>/dev/null || true
}
trap cleanup EXIT
"${admin[@]}" -c "DROP DATABASE IF EXISTS strand_floor" -c "CREATE DATABASE strand_floor OWNER strand"
work=$dir/floor
mkdir -p "$work"
STRAND_PG_DSN=$floor_dsn STRAND_HTTP_PORT=$PB STRAND_NODE_ID=floor-api \
  "$BUILD/services/api/strand-api" >"$work/api.log" 2>&1 </dev/null &
api=$!
deadline=$((SECONDS + 90))
until curl -fsS "http://127.0.0.1:$PB/readyz" >/dev/null 2>&1; do
  if [ $SECONDS -ge $deadline ] || ! kill -0 $api 2>/dev/null; then
    echo "floor: strand-api did not migrate strand_floor (see $work/api.log)" >&2
    exit 1
  fi
  sleep 0.2
done
kill $api; wait $api 2>/dev/null || true
api=
psql "$floor_dsn" -qX -v ON_ERROR_STOP=1 -c "INSERT INTO strand.definitions (name, version, kind, source, canonical)
  SELECT 'floor_w1', 1, 'flow', d, d FROM (SELECT '{\"kind\": \"flow\", \"name\": \"floor_w1\", \"version\": 1,
  \"steps\": [{\"id\": \"a\", \"type\": \"set\", \"values\": {\"x\": \"input.i + 1\"}},
  {\"id\": \"b\", \"type\": \"set\", \"values\": {\"y\": \"state.x * 2\"}},
  {\"id\": \"c\", \"type\": \"complete\", \"output\": {\"y\": \"state.y\"}}]}'::jsonb AS d) s"

. "$repo/bench/cpu_ticks.sh"

# One pgbench run; $1: the label, the rest: extra pgbench options.
pg_floor() {
  local label=$1 out p0 m0 p1 m1
  shift
  psql "$floor_dsn" -qX -c "VACUUM ANALYZE" 2>/dev/null
  p0=$(pg_ticks "$dir") m0=$(machine_ticks)
  # strand.wake_by_hint on: the executor's sessions write without the wake notification
  # (migration 0026), as in W1.
  out=$(PGOPTIONS="-c strand.wake_by_hint=on" pgbench "$floor_dsn" -n -M prepared -c 16 -j 2 \
          -t $((N / 2 / 16)) -f bench/floor/w1_db.sql "$@" 2>&1) ||
    { echo "$out" >&2; echo "floor: pgbench failed" >&2; exit 1; }
  p1=$(pg_ticks "$dir") m1=$(machine_ticks)
  local tps inst
  tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  inst=$(( N / 2 / 16 * 16 * 2 ))
  awk -v l="$label" -v tps="$tps" -v p=$((p1 - p0)) -v m=$((m1 - m0)) -v n="$inst" -v hz="$hz" \
    'BEGIN {printf "floor: PostgreSQL, %s: %.0f instances/s; PostgreSQL CPU %.0f us per instance, machine %.0f us (pgbench included)\n", l, 2 * tps, p * 1e6 / hz / n, m * 1e6 / hz / n}'
}

echo "floor: $(git describe --always --dirty), load $(cut -d' ' -f1-3 /proc/loadavg), $N per measurement" >&2
pg_floor "16 clients, as fast as it goes"
pg_floor "16 clients at $RATE instances/s" -R "$(awk -v r="$RATE" 'BEGIN {print r / 2}')"
"${admin[@]}" -c "DROP DATABASE strand_floor"

kafka_pid=$(cat "$dir/kafka.pid")
for rate in 1000 "$RATE"; do
  printf 'floor: Kafka, '
  "$BUILD/bench/strand-kafka-floor" --brokers "$STRAND_KAFKA_BROKERS" --broker-pid "$kafka_pid" \
    --rate "$rate" --n "$N" | sed 's/^kafka-floor: //'
done
