#!/usr/bin/env bash
# Starts, checks and stops Strand's dev stack on loopback: PostgreSQL 15, Redis and a
# single-node Apache Kafka broker in KRaft mode (from Maven Central, run with Java 17).
#
#   scripts/stack.sh start|stop|status|env
#   scripts/stack.sh restart postgres|kafka|redis     (fault injection in tests)
#   scripts/stack.sh stop redis / start redis          (Redis alone: it is optional)
#
# Idempotent: `start` starts only what is not running and waits until each part is
# ready; `stop` stops only what this stack directory started (by PID file). Ports and
# directories are configurable so that a test stack can run beside a developer's:
#   STRAND_STACK_DIR   data, logs and PID files   (default: <repo>/.stack)
#   STRAND_PG_PORT     PostgreSQL port            (default: 15432)
#   STRAND_REDIS_PORT  Redis port                 (default: 16379)
#   STRAND_KAFKA_PORT  Kafka broker port          (default: 19092; controller: +1)
# `env` prints the STRAND_* variables that point services at this stack.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
dir=${STRAND_STACK_DIR:-$repo/.stack}
pg_port=${STRAND_PG_PORT:-15432}
redis_port=${STRAND_REDIS_PORT:-16379}
kafka_port=${STRAND_KAFKA_PORT:-19092}
controller_port=$((kafka_port + 1))
pg_bin=/usr/lib/postgresql/15/bin

log() { echo "stack: $*"; }
die() { echo "stack: $*" >&2; exit 1; }

# Runs a command as the postgres user when we are root (PostgreSQL refuses root).
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pid_alive() { [ -f "$1" ] && kill -0 "$(head -n1 "$1")" 2>/dev/null; }

wait_for() { # wait_for <seconds> <description> <command...>
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || die "$what not ready after ${secs}s (logs: $dir/logs)"
    sleep 0.2
  done
}

# ---- PostgreSQL -------------------------------------------------------------------
pg_data=$dir/postgres
pg_ready() { "$pg_bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port"; }

pg_start() {
  mkdir -p "$dir/logs"
  if [ ! -f "$pg_data/PG_VERSION" ]; then
    log "initialising PostgreSQL in $pg_data"
    mkdir -p "$pg_data"
    [ "$(id -u)" -ne 0 ] || chown postgres:postgres "$pg_data"
    chmod 700 "$pg_data"
    as_pg "$pg_bin/initdb" -D "$pg_data" -U postgres --auth=trust -E UTF8 >/dev/null
    cat >>"$pg_data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = ''
max_connections = 200
shared_buffers = 256MB
synchronous_commit = on
fsync = on
CONF
  fi
  if pg_ready; then log "PostgreSQL already running on $pg_port"; return; fi
  [ "$(id -u)" -ne 0 ] || { touch "$dir/logs/postgres.log"; chown postgres "$dir/logs/postgres.log"; }
  as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$dir/logs/postgres.log" -o "-p $pg_port" -w -t 60 start >/dev/null
  wait_for 60 PostgreSQL pg_ready
  psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname = 'strand'" | grep -q 1 ||
    psql_admin -qc "CREATE ROLE strand LOGIN"
  psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname = 'strand'" | grep -q 1 ||
    psql_admin -qc "CREATE DATABASE strand OWNER strand"
  log "PostgreSQL ready on 127.0.0.1:$pg_port"
}

psql_admin() { psql -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }

pg_stop() {
  if [ -f "$pg_data/postmaster.pid" ]; then
    as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast -w -t 60 stop >/dev/null && log "PostgreSQL stopped"
  fi
}

# ---- Redis ------------------------------------------------------------------------
redis_pid=$dir/redis.pid
redis_ready() { [ "$(redis-cli -h 127.0.0.1 -p "$redis_port" ping 2>/dev/null)" = PONG ]; }

redis_start() {
  mkdir -p "$dir/redis" "$dir/logs"
  if pid_alive "$redis_pid" && redis_ready; then log "Redis already running on $redis_port"; return; fi
  redis-server --bind 127.0.0.1 --port "$redis_port" --daemonize yes --pidfile "$redis_pid" \
    --dir "$dir/redis" --logfile "$dir/logs/redis.log" --save "" --appendonly no >/dev/null
  wait_for 20 Redis redis_ready
  log "Redis ready on 127.0.0.1:$redis_port"
}

redis_stop() { stop_pid "$redis_pid" Redis; }

# ---- Kafka (KRaft, broker + controller in one process) -----------------------------
kafka_dir=$dir/kafka
kafka_pid=$dir/kafka.pid
kafka_ready() { port_open "$kafka_port" && grep -q "Kafka Server started" "$dir/logs/kafka.log" 2>/dev/null; }

kafka_start() {
  mkdir -p "$kafka_dir" "$dir/logs"
  if pid_alive "$kafka_pid"; then
    wait_for 90 Kafka kafka_ready
    log "Kafka already running on $kafka_port"; return
  fi
  local lib
  lib=$("$here/kafka/assemble.sh" | tail -n1)
  cat >"$kafka_dir/server.properties" <<CONF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$controller_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$kafka_dir/data
num.partitions=8
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=24
CONF
  cat >"$kafka_dir/log4j2.yaml" <<'CONF'
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: STDOUT
    Logger:
      - name: kafka.server.KafkaRaftServer
        level: INFO
CONF
  if [ ! -f "$kafka_dir/data/meta.properties" ]; then
    log "formatting Kafka log directory $kafka_dir/data"
    local cluster_id
    cluster_id=$(java -cp "$lib/*" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n1)
    java -Dlog4j2.configurationFile="$kafka_dir/log4j2.yaml" -cp "$lib/*" kafka.tools.StorageTool \
      format --standalone -t "$cluster_id" -c "$kafka_dir/server.properties" >"$dir/logs/kafka-format.log" 2>&1 ||
      die "could not format the Kafka log directory (see $dir/logs/kafka-format.log)"
  fi
  : >"$dir/logs/kafka.log"
  nohup java -Xms256m -Xmx${STRAND_KAFKA_HEAP:-768m} -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$kafka_dir/log4j2.yaml" -cp "$lib/*" \
    kafka.Kafka "$kafka_dir/server.properties" >>"$dir/logs/kafka.log" 2>&1 </dev/null &
  echo $! >"$kafka_pid"
  wait_for 90 Kafka kafka_ready
  log "Kafka ready on 127.0.0.1:$kafka_port"
}

kafka_stop() { stop_pid "$kafka_pid" Kafka 40; }

# Stops the process in a PID file: TERM, then KILL after a grace period.
stop_pid() {
  local file=$1 what=$2 grace=${3:-20}
  if ! pid_alive "$file"; then rm -f "$file"; return; fi
  local pid; pid=$(head -n1 "$file")
  kill "$pid"
  local deadline=$((SECONDS + grace))
  while kill -0 "$pid" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then kill -9 "$pid" 2>/dev/null || true; break; fi
    sleep 0.2
  done
  rm -f "$file"
  log "$what stopped"
}

status_line() { # status_line <name> <ready-fn> <address>
  if "$2"; then echo "$1: up ($3)"; else echo "$1: down"; return 1; fi
}

print_env() {
  cat <<ENV
export STRAND_PG_DSN="host=127.0.0.1 port=$pg_port dbname=strand user=strand"
export STRAND_KAFKA_BROKERS="127.0.0.1:$kafka_port"
export STRAND_REDIS_URL="redis://127.0.0.1:$redis_port"
ENV
}

case "${1:-}" in
  start) if [ "${2:-}" = redis ]; then redis_start; else pg_start; redis_start; kafka_start; fi ;;
  stop) if [ "${2:-}" = redis ]; then redis_stop; else kafka_stop; redis_stop; pg_stop; fi ;;
  status)
    rc=0
    status_line postgres pg_ready "127.0.0.1:$pg_port" || rc=1
    status_line redis redis_ready "127.0.0.1:$redis_port" || rc=1
    status_line kafka kafka_ready "127.0.0.1:$kafka_port" || rc=1
    exit $rc ;;
  env) print_env ;;
  restart)   # for fault-injection tests: restart one server in place
    case "${2:-}" in
      postgres) as_pg "$pg_bin/pg_ctl" -D "$pg_data" -m fast -w -t 60 restart -l "$dir/logs/postgres.log" -o "-p $pg_port" >/dev/null
                wait_for 60 PostgreSQL pg_ready; log "PostgreSQL restarted" ;;
      kafka) kafka_stop; kafka_start ;;
      redis) redis_stop; redis_start ;;
      *) echo "usage: $0 restart postgres|kafka|redis" >&2; exit 2 ;;
    esac ;;
  *) echo "usage: $0 start|stop|status|env|restart <server>" >&2; exit 2 ;;
esac
