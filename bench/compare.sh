#!/usr/bin/env bash
# Runs strand-bench W1-W4, the peer engines' W1/W2 and timer workload W3 (Restate, DBOS,
# Temporal) on the same machine in the same run, Strand's concurrency curve (W1 at 1 to 256
# clients, and W3 while W1 runs), and the cost curves; writes the results into
# docs/benchmarks.md.
#
#   bench/compare.sh            full run (about an hour on 2 cores: Temporal's W1 rounds
#                               and W3 take 30-45 minutes of it, the other peers' W3 about 10)
#   bench/compare.sh --quick    small N everywhere (a smoke run; does not touch the doc
#                               unless STRAND_BENCH_WRITE_DOC=1)
#
# Uses the stack of scripts/stack.sh (STRAND_STACK_DIR, STRAND_PG_PORT, ... as there;
# started if not running) and starts its own strand-api/executor/scheduler/monitor on
# ports STRAND_BENCH_PORT_BASE..+5 (default 28180) from STRAND_BENCH_BUILD (default
# build/, release). Peers come from .cache/peers (bench/peers/setup.sh, run here when
# missing); Restate listens on PORT_BASE+10..+13; DBOS uses the database dbos_bench of
# the same PostgreSQL; Temporal listens on PORT_BASE+20..+28 and keeps its state in the
# databases temporal and temporal_visibility of the same PostgreSQL (created afresh by
# each run, schema by its temporal-sql-tool). A peer that cannot be installed or started
# is reported as such in the doc, and the run continues.
#
# W1 is the throughput comparison, and one run of it on a 2-core machine moves by +-20%:
# every engine first gets an untimed warm-up W1 (STRAND_BENCH_WARMUP_N instances: JIT
# compilers, caches and connection pools warm; Strand's stack gets
# STRAND_BENCH_STRAND_WARMUP_N, since its broker is a JVM whose JIT compiler takes some
# 20,000 messages to settle, where the peers run no JVM), then STRAND_BENCH_ROUNDS timed W1 runs;
# the doc reports each engine's median round and all the rounds' rates. Strand's and
# Restate's timed rounds alternate, so that each pair meets the same machine.
#
# Environment: STRAND_BENCH_N_W1 (5000), _N_W2 (1000), _N_W3 (10000), _N_W4 (300),
# STRAND_BENCH_ROUNDS (5), STRAND_BENCH_WARMUP_N (2000), STRAND_BENCH_STRAND_WARMUP_N (20000),
# STRAND_BENCH_CONCURRENCY (16), STRAND_BENCH_CURVE_N (2000: W1 size at each curve
# point), STRAND_BENCH_CURVE_LEVELS ("1000 10000 100000" waiting instances),
# STRAND_BENCH_CONC_LEVELS ("1 4 16 64 256": client counts of the concurrency curve),
# STRAND_BENCH_CONC_N (W1 size at each of its points, at least 8 per client),
# STRAND_BENCH_LATENCY_LEVELS ("1 4": client counts at which W2 and W4 run again, below
# the saturation of the main runs' clients, for their latency alone),
# STRAND_BENCH_PEER_LEAD_MS (the peers' W3 timers are created through their APIs one
# workflow at a time, so the first one is due this long after the start; default 0: each
# driver sets 2 s + 1.5 x N / the rate at which it could create timers on an untimed
# probe; Strand's timers are written in SQL batches, 2 s + N/2 ms ahead; the peers' W3
# may run up to 20 minutes),
# STRAND_BENCH_NOTE (a sentence for the doc, e.g. what else ran on the machine).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
quick=0
[ "${1:-}" = "--quick" ] && quick=1
if [ $quick = 1 ]; then
  N1=${STRAND_BENCH_N_W1:-300} N2=${STRAND_BENCH_N_W2:-200} N3=${STRAND_BENCH_N_W3:-1000}
  N4=${STRAND_BENCH_N_W4:-50} CN=${STRAND_BENCH_CURVE_N:-300}
  LEVELS=${STRAND_BENCH_CURVE_LEVELS:-"1000 3000"} W3MS=5000
  ROUNDS=${STRAND_BENCH_ROUNDS:-1} WARM=${STRAND_BENCH_WARMUP_N:-50}
  SWARM=${STRAND_BENCH_STRAND_WARMUP_N:-50}
  CONCN=${STRAND_BENCH_CONC_N:-100}
else
  N1=${STRAND_BENCH_N_W1:-5000} N2=${STRAND_BENCH_N_W2:-1000} N3=${STRAND_BENCH_N_W3:-10000}
  N4=${STRAND_BENCH_N_W4:-300} CN=${STRAND_BENCH_CURVE_N:-2000}
  LEVELS=${STRAND_BENCH_CURVE_LEVELS:-"1000 10000 100000"} W3MS=20000
  ROUNDS=${STRAND_BENCH_ROUNDS:-5} WARM=${STRAND_BENCH_WARMUP_N:-2000}
  SWARM=${STRAND_BENCH_STRAND_WARMUP_N:-20000}
  CONCN=${STRAND_BENCH_CONC_N:-2000}
fi
LEAD=${STRAND_BENCH_PEER_LEAD_MS:-0}
CONC_LEVELS=${STRAND_BENCH_CONC_LEVELS:-"1 4 16 64 256"}
LAT_LEVELS=${STRAND_BENCH_LATENCY_LEVELS:-"1 4"}
C=${STRAND_BENCH_CONCURRENCY:-16}
BUILD=${STRAND_BENCH_BUILD:-$repo/build}
PB=${STRAND_BENCH_PORT_BASE:-28180}
PEERS=${STRAND_PEERS_DIR:-$repo/.cache/peers}
bench=$BUILD/bench/strand-bench
[ -x "$bench" ] || { echo "compare: $bench missing; build first (scripts/build.sh release)" >&2; exit 1; }

stack_dir=${STRAND_STACK_DIR:-$repo/.stack}
work=$stack_dir/bench
rm -rf "$work" && mkdir -p "$work/logs"
results=$work/results.jsonl
: >"$results"
log() { echo "compare: $*" >&2; }

scripts/stack.sh start >&2 || { log "stack did not start"; exit 1; }
eval "$(scripts/stack.sh env)"
pg_port=${STRAND_PG_PORT:-15432}
psql_strand() { psql -h 127.0.0.1 -p "$pg_port" -U strand -d strand -Atq -v ON_ERROR_STOP=1 "$@"; }
psql_admin() { psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -Atq -v ON_ERROR_STOP=1 "$@"; }

# ---- Strand services --------------------------------------------------------------
declare -A port=([api]=$PB [executor]=$((PB + 1)) [scheduler]=$((PB + 2)) [monitor]=$((PB + 3)))
declare -A pid=()
started=()
start_svc() { # name binary-kind port
  local name=$1 kind=$2 p=$3
  STRAND_HTTP_PORT=$p STRAND_NODE_ID=bench-$name nohup "$BUILD/services/$kind/strand-$kind" \
    >>"$work/logs/$name.log" 2>&1 </dev/null &
  pid[$name]=$!
  started+=($!)
  local deadline=$((SECONDS + 90))
  until curl -fsS "http://127.0.0.1:$p/readyz" >/dev/null 2>&1; do
    kill -0 "${pid[$name]}" 2>/dev/null || { log "$name exited; see $work/logs/$name.log"; return 1; }
    [ $SECONDS -lt $deadline ] || { log "$name not ready"; return 1; }
    sleep 0.2
  done
}
stop_pid() {
  local p=$1
  kill "$p" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$p" 2>/dev/null
}
cleanup() {
  for p in "${started[@]}"; do stop_pid "$p"; done
}
trap cleanup EXIT

for s in api executor scheduler monitor; do start_svc "$s" "$s" "${port[$s]}" || exit 1; done
# instances of earlier benchmark runs (definitions bench_w1, bench_w2, bench_w4; the fill's
# copies included) would distort the curves: delete them (their rows cascade)
log "deleting the instances of earlier benchmark runs"
psql_strand -c "DELETE FROM strand.instances WHERE definition_name IN ('bench_w1', 'bench_w2', 'bench_w4')" &&
  psql_strand -c "VACUUM ANALYZE" 2>/dev/null
export STRAND_API_URL=http://127.0.0.1:${port[api]}
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
meta() { echo "{\"meta\":\"$1\",\"value\":$2}" >>"$results"; }

load1() { echo "{\"load1\":$(cut -d' ' -f1 /proc/loadavg)}" >>"$results"; }
sb() { # strand-bench args...; appends its JSON lines (client concurrency SB_C, default C)
  log "strand-bench $* (concurrency ${SB_C:-$C})"
  load1
  "$bench" --json "$@" --concurrency "${SB_C:-$C}" >>"$results" 2>>"$work/logs/strand-bench.err" ||
    log "strand-bench $* did not complete every instance (see the table)"
}

# ---- CPU accounting: what one timed W1 round cost the machine ----------------------
# Busy time of the whole machine from /proc/stat (the engine, its database or broker
# and the client: everything that ran), and the shares of PostgreSQL, the Kafka broker
# and the Strand services from /proc/<pid>/stat (a process's own time plus that of its
# children it reaped, so PostgreSQL backends that exit are counted too).
hz=$(getconf CLK_TCK)
. "$repo/bench/cpu_ticks.sh"
strand_ticks() { proc_ticks "${pid[@]}"; }
cpu_begin() { c_m=$(machine_ticks) c_st=$(steal_ticks) c_pg=$(pg_ticks "$stack_dir") c_k=$(kafka_ticks "$stack_dir") c_s=$(strand_ticks) c_t=$(date +%s.%N); }
cpu_end() { # engine: appends the round's CPU seconds
  python3 -c 'import json, sys, time; hz = float(sys.argv[2]); wall = time.time() - float(sys.argv[3]); v = [int(x) / hz for x in sys.argv[4:]]; print(json.dumps({"cpu_round": sys.argv[1], "wall_s": wall, "machine_s": v[0], "postgres_s": v[1], "kafka_s": v[2], "strand_s": v[3], "steal_s": v[4]}))' \
    "$1" "$hz" "$c_t" $(($(machine_ticks) - c_m)) $(($(pg_ticks "$stack_dir") - c_pg)) \
    $(($(kafka_ticks "$stack_dir") - c_k)) $(($(strand_ticks) - c_s)) $(($(steal_ticks) - c_st)) >>"$results"
}

t_start=$(date -u +%FT%TZ)
meta started "\"$t_start\""
meta commit "\"$(git describe --always --dirty 2>/dev/null || echo unknown)\""
meta host "\"$(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)\""
meta loadavg "\"$(cut -d' ' -f1-3 /proc/loadavg)\""
meta rounds "$ROUNDS"
meta cores "$(nproc)"
meta warmup_n "$WARM"
meta strand_warmup_n "$SWARM"
meta executor_rss_idle_kb "$(rss_kb "${pid[executor]}")"

# ---- Strand W1-W4 -----------------------------------------------------------------
# drain: wait (up to 180 s) until every outbox row is published and the executor has
# stopped recording processed signals, so that one workload's tail never queues in
# front of the next one's (W3's 10,000 TIMER_DUE signals take the executor a while).
drain() {
  local last=-1 now deadline=$((SECONDS + 180))
  while [ $SECONDS -lt $deadline ]; do
    now=$(psql_strand -c "SELECT (SELECT count(*) FROM strand.processed_signals) + (SELECT count(*) FROM strand.outbox WHERE published_at IS NULL)")
    [ "$now" = "$last" ] && [ "$(psql_strand -c "SELECT count(*) FROM strand.outbox WHERE published_at IS NULL")" = 0 ] && return 0
    last=$now
    sleep 2
  done
  log "drain: still busy after 180 s"
}

# W3 alone measures the scheduler with nothing else running; right after W4 the
# database still works off what W4 left (autovacuum of the hot tables, dirty buffers).
# settle: VACUUM and CHECKPOINT, then wait (at most 120 s) for a 5-second window in
# which the machine's CPUs are at least 90% idle; the doc prints the load it started at.
settle() {
  psql_strand -c "VACUUM ANALYZE" 2>/dev/null
  psql_admin -c "CHECKPOINT" 2>/dev/null
  local deadline=$((SECONDS + 120)) idle
  while [ $SECONDS -lt $deadline ]; do
    idle=$(python3 -c 'import time
def t():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return f[3], sum(f)
a = t(); time.sleep(5); b = t()
print(int(100 * (b[0] - a[0]) / max(1, b[1] - a[1])))')
    [ "$idle" -ge 90 ] && { log "settled: ${idle}% idle over 5 s"; return 0; }
  done
  log "settle: the machine was not 90% idle within 120 s (last ${idle}%)"
}

# ---- peers ------------------------------------------------------------------------
peer_status() { echo "{\"peer\":\"$1\",\"status\":\"$2\",\"detail\":$(printf '%s' "$3" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')}" >>"$results"; }
missing_peers=""
[ -x "$PEERS/restate/node_modules/.bin/restate-server" ] || missing_peers+=" restate"
[ -x "$PEERS/dbos/venv/bin/python" ] || missing_peers+=" dbos"
[ -x "$PEERS/temporal/bin/temporal-server" ] && [ -x "$PEERS/temporal/bin/temporal-bench" ] || missing_peers+=" temporal"
if [ -n "$missing_peers" ]; then
  log "installing the peers:$missing_peers (bench/peers/setup.sh; Temporal's first build takes minutes)"
  # shellcheck disable=SC2086
  bench/peers/setup.sh $missing_peers >"$work/logs/peers-setup.log" 2>&1 || log "peer setup failed; see $work/logs/peers-setup.log"
fi

# Restate runs beside Strand during W1 so that their rounds can alternate (below).
restate_ok=0 restate_spid="" restate_vpid=""
restate_start() {
  local dir=$PEERS/restate rs=$work/restate
  local server=$dir/node_modules/.bin/restate-server
  [ -x "$server" ] || { peer_status restate missing "restate-server not installed (bench/peers/setup.sh failed: $(tail -n 3 "$work/logs/peers-setup.log" 2>/dev/null))"; return; }
  mkdir -p "$rs"
  cp bench/peers/restate/*.mjs "$dir/"
  cat >"$rs/restate.toml" <<EOF
bind-port = $((PB + 12))
disable-telemetry = true
[ingress]
bind-port = $((PB + 10))
[admin]
bind-port = $((PB + 11))
EOF
  RESTATE_BASE_DIR=$rs/data nohup "$server" --no-logo --bind-ip 127.0.0.1 --listen-mode tcp -c "$rs/restate.toml" \
    >"$work/logs/restate-server.log" 2>&1 </dev/null &
  restate_spid=$!
  started+=($restate_spid)
  RESTATE_SERVICE_PORT=$((PB + 13)) nohup node --import "$dir/polyfill.mjs" "$dir/service.mjs" \
    >"$work/logs/restate-service.log" 2>&1 </dev/null &
  restate_vpid=$!
  started+=($restate_vpid)
  local deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    if curl -fsS -X POST "http://127.0.0.1:$((PB + 11))/deployments" -H 'content-type: application/json' \
         -d "{\"uri\":\"http://127.0.0.1:$((PB + 13))\"}" >"$work/logs/restate-register.json" 2>/dev/null; then restate_ok=1; break; fi
    sleep 0.5
  done
  if [ $restate_ok = 1 ]; then
    sleep 1
    peer_status restate ok "restate-server $("$server" --version 2>/dev/null | awk '{print $2}'), @restatedev/restate-sdk $(node -p "require('$dir/node_modules/@restatedev/restate-sdk/package.json').version") on Node $(node --version)"
  else
    peer_status restate failed "restate-server did not accept the deployment within 60 s: $(tail -n 5 "$work/logs/restate-server.log")"
    restate_stop
  fi
}
restate_run() { # workload n label [driver args]
  [ $restate_ok = 1 ] || return 0
  local w=$1 n=$2 label=$3
  shift 3
  log "restate $w n=$n ($label)"
  load1
  cpu_begin
  RESTATE_INGRESS=http://127.0.0.1:$((PB + 10)) RESTATE_ADMIN=http://127.0.0.1:$((PB + 11)) \
    timeout 1500 node "$PEERS/restate/bench.mjs" --workload "$w" --n "$n" --concurrency "$C" --timeout 600 --label "$label" --json "$@" \
    >>"$results" 2>>"$work/logs/restate-bench.err" || log "restate $w incomplete"
  [ "$w" = w1 ] && [ "$label" = main ] && cpu_end restate
  return 0
}
restate_stop() {
  [ -n "$restate_spid" ] && echo "{\"meta\":\"restate_rss_kb\",\"value\":$(rss_kb "$restate_spid")}" >>"$results"
  [ -n "$restate_vpid" ] && stop_pid "$restate_vpid"
  [ -n "$restate_spid" ] && stop_pid "$restate_spid"
  restate_ok=0 restate_spid="" restate_vpid=""
}

# W1 rounds alternate between Strand and Restate (the best peer so far): this VM's
# speed drifts by tens of percent over minutes (neighbours on the host), and rounds run
# side by side see the same machine. Each pair begins with a calibration job, a fixed
# piece of interpreter work whose CPU time shows how fast the machine was then.
calibrate() {
  python3 -c 'import json, time
def job():
    t = time.process_time(); s = 0
    for i in range(3000000): s += i * i
    return time.process_time() - t
print(json.dumps({"calibration_s": sorted(job() for _ in range(3))[1]}))' >>"$results"
}
restate_start
sb --workload w1 --n "$SWARM" --label warmup --timeout 600
# Statistics taken now describe tables with rows in them. The VACUUM ANALYZE above ran on
# (nearly) empty tables: the services' connections then cache generic plans costed for
# empty tables (sequential scans), which stay until autovacuum analyzes again, up to a
# minute or more later; on a fresh stack that made the first three timed rounds run at a
# third of the speed (docs/benchmarks.md). ANALYZE invalidates those plans.
psql_strand -c "ANALYZE" 2>/dev/null
drain
restate_run w1 "$WARM" warmup
for round in $(seq 1 "$ROUNDS"); do
  calibrate
  # the first round also measures the tables' growth per instance
  cpu_begin
  sb --workload w1 --n "$N1" $([ "$round" = 1 ] && echo --storage) --label main --timeout 600
  cpu_end strand
  drain
  restate_run w1 "$N1" main
done
meta executor_rss_after_w1_kb "$(rss_kb "${pid[executor]}")"
restate_run w2 "$N2" main
restate_run w3 "$N3" main --window-ms "$W3MS" --lead-ms "$LEAD" --timeout 1200
restate_stop
drain
sb --workload w2 --n "$N2" --storage --label main --timeout 600
drain
sb --workload w4 --n "$N4" --storage --label main --timeout 600
drain
settle
sb --workload w3 --n "$N3" --window-ms "$W3MS" --label main --timeout 600
drain

# ---- concurrency curve: W1 at 1 .. 256 clients, then W3 while W1 runs --------------
for c in $CONC_LEVELS; do
  n=$CONCN
  [ "$n" -ge $((8 * c)) ] || n=$((8 * c))
  SB_C=$c sb --workload w1 --n "$n" --label "conc-$c" --timeout 600
  drain
done
# W2 and W4 at fewer clients: at the main runs' client count the two cores are
# saturated and their latency is mostly queueing (clients / rate); here, their latency
for c in $LAT_LEVELS; do
  SB_C=$c sb --workload w2 --n "$N2" --label "conc-$c" --timeout 600
  drain
  SB_C=$c sb --workload w4 --n "$N4" --label "conc-$c" --timeout 600
  drain
done
# W3's timers while W1 runs at full speed (C clients) from before the first timer is due
# until the last has fired: W1 runs of CONCN instances back to back until W3 ends
log "strand-bench w3 while W1 runs"
w3load=$(cut -d' ' -f1 /proc/loadavg)
"$bench" --json --workload w3 --n "$N3" --window-ms "$W3MS" --label under-w1 --timeout 600 \
  >"$work/w3-under-w1.json" 2>>"$work/logs/strand-bench.err" &
w3pid=$!
started+=($w3pid)
while kill -0 "$w3pid" 2>/dev/null; do
  sb --workload w1 --n "$CONCN" --label w1-beside-w3 --timeout 600
done
wait "$w3pid" || log "strand-bench w3 under W1 did not fire every timer (see the table)"
echo "{\"load1\":$w3load}" >>"$results"
cat "$work/w3-under-w1.json" >>"$results"
drain

run_dbos() {
  local py=$PEERS/dbos/venv/bin/python
  [ -x "$py" ] || { peer_status dbos missing "dbos not installed (bench/peers/setup.sh failed)"; return; }
  if [ "$(psql_admin -c "SELECT count(*) FROM pg_database WHERE datname = 'dbos_bench'")" = 0 ]; then
    psql_admin -c "CREATE DATABASE dbos_bench OWNER strand" || { peer_status dbos failed "could not create the database dbos_bench"; return; }
  fi
  export DBOS_SYSTEM_DATABASE_URL="postgresql://strand@127.0.0.1:$pg_port/dbos_bench"
  peer_status dbos ok "dbos $("$py" -c 'import importlib.metadata as m; print(m.version("dbos"))') on Python $("$py" -c 'import platform; print(platform.python_version())'), system database on the same PostgreSQL 15"
  # each workload in DBOS's faster form here: W1 as threads calling sync workflows, W2 as
  # async workflows (a thread blocked in recv per waiting workflow is far slower)
  local w n variant label
  for run in warmup $(seq 1 "$ROUNDS") w2 w3; do
    w=w1 n=$N1 variant="" label=main
    [ $run = warmup ] && n=$WARM label=warmup
    [ $run = w2 ] && w=w2 n=$N2 variant=--async
    [ $run = w3 ] && w=w3 n=$N3 variant="--window-ms $W3MS --lead-ms $LEAD --timeout 1200"
    log "dbos $w n=$n $variant ($label)"
    load1
    cpu_begin
    # shellcheck disable=SC2086
    timeout 1500 "$py" bench/peers/dbos/bench.py --workload $w --n "$n" --concurrency "$C" --timeout 600 --label $label --json $variant \
      >>"$results" 2>>"$work/logs/dbos-bench.err" || log "dbos $w incomplete"
    [ $w = w1 ] && [ $label = main ] && cpu_end dbos
  done
}
run_dbos

# Temporal: its own server process (frontend, history, matching and worker services in
# one), PostgreSQL persistence in the same PostgreSQL 15, default dynamic configuration;
# the workers run inside temporal-bench (Go SDK), one task queue per run.
run_temporal() {
  local bin=$PEERS/temporal/bin tw=$work/temporal
  if [ ! -x "$bin/temporal-server" ] || [ ! -x "$bin/temporal-bench" ]; then
    peer_status temporal missing "temporal-server not built (bench/peers/setup.sh temporal failed: $(tail -n 3 "$work/logs/peers-setup.log" 2>/dev/null))"
    return
  fi
  mkdir -p "$tw"
  # fresh databases every run, as Restate gets a fresh data directory
  local db
  for db in temporal temporal_visibility; do
    psql_admin -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" && psql_admin -c "CREATE DATABASE $db OWNER strand" ||
      { peer_status temporal failed "could not create the database $db"; return; }
  done
  local sqlt=("$bin/temporal-sql-tool" --plugin postgres12 --ep 127.0.0.1 -p "$pg_port" -u strand)
  if ! { "${sqlt[@]}" --db temporal setup-schema -v 0.0 &&
         "${sqlt[@]}" --db temporal update-schema --schema-name postgresql/v12/temporal &&
         "${sqlt[@]}" --db temporal_visibility setup-schema -v 0.0 &&
         "${sqlt[@]}" --db temporal_visibility update-schema --schema-name postgresql/v12/visibility; } \
       >"$work/logs/temporal-schema.log" 2>&1; then
    peer_status temporal failed "temporal-sql-tool: $(tail -n 3 "$work/logs/temporal-schema.log")"
    return
  fi
  # the configuration of the server's development-postgres12.yaml, on loopback ports of
  # our own, without metrics, pprof and archival; no dynamic configuration file (defaults)
  sql() { # database max-conns
    cat <<EOF
      sql:
        pluginName: "postgres12"
        databaseName: "$1"
        connectAddr: "127.0.0.1:$pg_port"
        connectProtocol: "tcp"
        user: "strand"
        password: ""
        maxConns: $2
        maxIdleConns: $2
        maxConnLifetime: "1h"
EOF
  }
  svc() { # name grpc-port membership-port
    printf '  %s:\n    rpc:\n      grpcPort: %s\n      membershipPort: %s\n      bindOnLocalHost: true\n' "$1" "$2" "$3"
  }
  {
    printf 'log:\n  stdout: true\n  level: warn\n\npersistence:\n  defaultStore: postgres-default\n'
    printf '  visibilityStore: postgres-visibility\n  numHistoryShards: 4\n  datastores:\n'
    printf '    postgres-default:\n'; sql temporal 20
    printf '    postgres-visibility:\n'; sql temporal_visibility 2
    printf '\nglobal:\n  membership:\n    maxJoinDuration: 30s\n    broadcastAddress: "127.0.0.1"\n\nservices:\n'
    svc frontend $((PB + 20)) $((PB + 21)); printf '      httpPort: %s\n' $((PB + 28))
    svc history $((PB + 22)) $((PB + 23))
    svc matching $((PB + 24)) $((PB + 25))
    svc worker $((PB + 26)) $((PB + 27))
    cat <<EOF

clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: "127.0.0.1:$((PB + 20))"

dcRedirectionPolicy:
  policy: "noop"
EOF
  } >"$tw/temporal.yaml"
  nohup "$bin/temporal-server" --config-file "$tw/temporal.yaml" --allow-no-auth start \
    >"$work/logs/temporal-server.log" 2>&1 </dev/null &
  local spid=$!
  started+=($spid)
  export TEMPORAL_ADDRESS=127.0.0.1:$((PB + 20)) TEMPORAL_NAMESPACE=default
  if ! timeout 200 "$bin/temporal-bench" --workload setup --timeout 180 >"$work/logs/temporal-setup.log" 2>&1; then
    peer_status temporal failed "the server did not accept workflows within 180 s: $(tail -n 3 "$work/logs/temporal-setup.log") $(tail -n 3 "$work/logs/temporal-server.log")"
    stop_pid "$spid"
    return
  fi
  local gover sdkver
  gover=$(go version -m "$bin/temporal-server" 2>/dev/null | awk 'NR == 1 {print $2}')
  sdkver=$(go version -m "$bin/temporal-bench" 2>/dev/null | awk '$2 == "go.temporal.io/sdk" {print $3}')
  peer_status temporal ok "temporal-server $("$bin/temporal-server" --version 2>/dev/null | awk '{print $NF}') built with ${gover:-Go}, PostgreSQL persistence (postgres12 plugin) on the same PostgreSQL 15, 4 history shards, default dynamic configuration; workers on go.temporal.io/sdk ${sdkver:-?} in the driver's process"
  local run w n args label
  for run in warmup $(seq 1 "$ROUNDS") w2 w3; do
    w=w1 n=$N1 args=() label=main
    [ $run = warmup ] && n=$WARM label=warmup
    [ $run = w2 ] && w=w2 n=$N2
    [ $run = w3 ] && w=w3 n=$N3 args=(--window-ms "$W3MS" --lead-ms "$LEAD" --timeout 1200)
    log "temporal $w n=$n ($label)"
    load1
    cpu_begin
    timeout 1500 "$bin/temporal-bench" --workload $w --n "$n" --concurrency "$C" --timeout 600 --label $label --json "${args[@]}" \
      >>"$results" 2>>"$work/logs/temporal-bench.err" || log "temporal $w incomplete"
    [ $w = w1 ] && [ $label = main ] && cpu_end temporal
  done
  meta temporal_rss_kb "$(rss_kb "$spid")"
  stop_pid "$spid"
}
run_temporal

# ---- cost curves ------------------------------------------------------------------
waiting_now() { psql_strand -c "SELECT count(*) FROM strand.instances WHERE status = 'waiting'"; }
curve_point() { # label [strand-bench args]
  drain
  local w; w=$(waiting_now)
  sb --workload w1 --n "$CN" --label "$@" --timeout 600
  local db; db=$(psql_strand -c "SELECT pg_database_size('strand')")
  local ex="${pid[executor]}" rss2=0
  [ -n "${pid[executor2]:-}" ] && rss2=$(rss_kb "${pid[executor2]}")
  echo "{\"curve\":\"$1\",\"waiting\":$w,\"executor_rss_kb\":$(rss_kb "$ex"),\"executor2_rss_kb\":$rss2,\"db_bytes\":$db}" >>"$results"
}
curve_point "waiting-base"
for level in $LEVELS; do
  have=$(waiting_now)
  if [ $((level - have)) -ge 2 ]; then
    log "fill to $level waiting instances"
    "$bench" --json --workload fill --n $((level - have - 1)) --timeout 900 >>"$results" 2>>"$work/logs/strand-bench.err"
  fi
  curve_point "waiting-$level"
done
# the storage of waiting instances: rows and bytes per waiting instance (fill copies real ones)
psql_strand -c "VACUUM ANALYZE" 2>/dev/null
for t in instances runtime_states history; do
  echo "{\"table\":\"$t\",\"rows\":$(psql_strand -c "SELECT count(*) FROM strand.$t"),\"bytes\":$(psql_strand -c "SELECT pg_total_relation_size('strand.$t')")}" >>"$results"
done
log "second executor replica"
start_svc executor2 executor $((PB + 4)) && sleep 8 && curve_point "replicas-2"
# W1 is bound by the API's start path (one request at a time on one PostgreSQL
# connection per API process): the same W1 through two API replicas (stateless), the
# client threads split between them
log "second API replica"
start_svc api2 api $((PB + 5)) &&
  curve_point "api-replicas-2" --api "$STRAND_API_URL,http://127.0.0.1:$((PB + 5))"
meta finished "\"$(date -u +%FT%TZ)\""
meta loadavg_end "\"$(cut -d' ' -f1-3 /proc/loadavg)\""

cmdline="bench/compare.sh${1:+ $1}"
for v in STRAND_BENCH_ROUNDS STRAND_BENCH_WARMUP_N STRAND_BENCH_STRAND_WARMUP_N STRAND_BENCH_CONCURRENCY STRAND_BENCH_CURVE_LEVELS STRAND_BENCH_CURVE_N STRAND_BENCH_N_W4 \
         STRAND_BENCH_N_W3 STRAND_BENCH_N_W2 STRAND_BENCH_N_W1 STRAND_BENCH_PORT_BASE STRAND_BENCH_BUILD \
         STRAND_KAFKA_PORT STRAND_REDIS_PORT STRAND_PG_PORT STRAND_STACK_DIR; do
  [ -n "${!v:-}" ] && cmdline="$v=${!v} $cmdline"
done
if [ $quick = 0 ] || [ "${STRAND_BENCH_WRITE_DOC:-0}" = 1 ]; then
  python3 bench/report.py "$results" docs/benchmarks.md "$cmdline" "${STRAND_BENCH_NOTE:-}" &&
    log "wrote docs/benchmarks.md"
else
  python3 bench/report.py "$results" - "$cmdline" "${STRAND_BENCH_NOTE:-}"
fi
log "raw results: $results"
