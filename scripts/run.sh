#!/usr/bin/env bash
# The main job: installs what is missing, builds, starts the stack (PostgreSQL, Redis,
# Kafka) and the four services, imports the example definition, starts a batch of
# instances, shows them complete, and prints where the API, metrics and logs are.
#
#   scripts/run.sh [start]     everything above (idempotent: running parts are kept)
#   scripts/run.sh stop        stops the services, then the stack
#   scripts/run.sh status      what is running
# Environment: STRAND_RUN_BATCH (20) instances to start; the stack's own variables
# (scripts/stack.sh) and every STRAND_* service setting (docs/configuration.md).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
dir=${STRAND_STACK_DIR:-$repo/.stack}
services=(api executor scheduler monitor)
declare -A ports=([api]=8080 [executor]=8081 [scheduler]=8082 [monitor]=8083)
ctl=build/services/strandctl/strandctl
export STRAND_API_URL=${STRAND_API_URL:-http://127.0.0.1:${ports[api]}}
# Calls may reach loopback workers only when listed (docs/configuration.md): the dev
# run allows the example worker (examples/signup/signup_worker.py on 8088), not the
# services' own ports. Set STRAND_CALL_ALLOW to list your own workers.
export STRAND_CALL_ALLOW=${STRAND_CALL_ALLOW-127.0.0.1:8088}

pid_alive() { [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null; }

ready() { curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null 2>&1; }

start_services() {
  mkdir -p "$dir/services" "$dir/logs"
  eval "$(scripts/stack.sh env)"
  for s in "${services[@]}"; do
    local pidf=$dir/services/$s.pid
    if pid_alive "$pidf"; then echo "run: strand-$s already running"; continue; fi
    STRAND_HTTP_PORT=${ports[$s]} nohup "build/services/$s/strand-$s" \
      >>"$dir/logs/$s.log" 2>&1 </dev/null &
    echo $! >"$pidf"
  done
  for s in "${services[@]}"; do
    local deadline=$((SECONDS + 90))
    until ready "${ports[$s]}"; do
      pid_alive "$dir/services/$s.pid" || { echo "run: strand-$s exited; see $dir/logs/$s.log" >&2; tail -n 20 "$dir/logs/$s.log" >&2; exit 1; }
      [ $SECONDS -lt $deadline ] || { echo "run: strand-$s not ready; see $dir/logs/$s.log" >&2; exit 1; }
      sleep 0.2
    done
    echo "run: strand-$s ready on 127.0.0.1:${ports[$s]}"
  done
}

stop_services() {
  for s in "${services[@]}"; do
    local pidf=$dir/services/$s.pid
    if pid_alive "$pidf"; then
      local pid; pid=$(head -n1 "$pidf")
      kill "$pid"
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
      echo "run: strand-$s stopped"
    fi
    rm -f "$pidf"
  done
}

demo() {
  local batch=${STRAND_RUN_BATCH:-20}
  "$ctl" definitions import docs/examples/hello.json >/dev/null
  echo "run: imported docs/examples/hello.json; starting $batch instances"
  local ids=() t0=$SECONDS
  for i in $(seq 1 "$batch"); do
    ids+=("$("$ctl" --json instances start hello --input "{\"name\":\"user$i\"}" |
            sed -n 's/^  "id": "\(.*\)",$/\1/p')")
  done
  local completed=0
  for id in "${ids[@]}"; do
    if "$ctl" instances wait "$id" --timeout 60 >/dev/null; then completed=$((completed + 1)); fi
  done
  "$ctl" instances list --definition hello --limit 5
  echo "run: $completed of $batch instances completed in $((SECONDS - t0)) s"
  [ "$completed" -eq "$batch" ]
}

case "${1:-start}" in
  start)
    scripts/deps.sh
    scripts/build.sh release
    scripts/stack.sh start
    start_services
    demo
    cat <<INFO

Strand is running.
  API        $STRAND_API_URL   (try: $ctl instances list)
  console    $STRAND_API_URL/ui/   (a web browser; authentication is off here)
  metrics    http://127.0.0.1:{8080,8081,8082,8083}/metrics
  health     /healthz and /readyz on the same ports
  logs       $dir/logs/{api,executor,scheduler,monitor}.log (JSON lines), stack logs beside them
  stop       scripts/run.sh stop
INFO
    ;;
  stop) stop_services; scripts/stack.sh stop ;;
  status)
    for s in "${services[@]}"; do
      if pid_alive "$dir/services/$s.pid"; then echo "strand-$s: running"; else echo "strand-$s: stopped"; fi
    done
    scripts/stack.sh status ;;
  *) echo "usage: $0 [start|stop|status]" >&2; exit 2 ;;
esac
