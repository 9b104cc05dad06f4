#!/usr/bin/env bash
# Starts, checks and stops Strand's dev stack on loopback: PostgreSQL 15, Redis and a
# single-node Apache Kafka broker in KRaft mode (from Maven Central, run with Java 17).
#
#   scripts/stack.sh start|stop|status|env
#   scripts/stack.sh start kafka|stop kafka            (a broker alone, e.g. a SASL one)
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
#   STRAND_KAFKA_SASL  1 = the broker requires SASL (SCRAM-SHA-512 or PLAIN over
#                      SASL_PLAINTEXT on loopback) and authorizes with ACLs
#                      (default: 0, plaintext, no ACLs).
#                      Chosen when the stack directory's broker is first formatted.
#   STRAND_TOPIC_PREFIX  topic and consumer-group prefix the ACLs cover (default: strand.)
# `env` prints the STRAND_* variables that point services at this stack (with SASL:
# the service principal's credentials, and STRAND_STACK_KAFKA_* for the others).
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

# SASL mode. The credentials file exists once the broker was formatted with SASL: it
# holds the passwords of the three principals (mode 600):
#   admin   the broker itself (inter-broker, controller) and super user
#   strand  Strand's services: every <prefix> topic and consumer group
#   app     applications: produce to <prefix>ingress, consume <prefix>notices and
#           <prefix>work with consumer groups named <prefix>app.*
kafka_creds=$kafka_dir/sasl.credentials
kafka_sasl() { [ -f "$kafka_creds" ] || [ "${STRAND_KAFKA_SASL:-0}" = 1 ]; }
topic_prefix=${STRAND_TOPIC_PREFIX:-strand.}

sasl_credentials() { # creates the credentials file once
  [ -f "$kafka_creds" ] && return
  local u
  ( umask 077
    for u in admin strand app; do
      echo "$u=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
    done >"$kafka_creds" )
}
sasl_password() { sed -n "s/^$1=//p" "$kafka_creds"; }
# SCRAM-SHA-512 unless the installed librdkafka is older than 2.6.1 (see above):
# then PLAIN, which the broker also accepts (loopback only: the password is sent as is).
sasl_mechanism() {
  local v; v=$(pkg-config --modversion rdkafka 2>/dev/null || echo 0)
  if printf '%s\n2.6.1\n' "$v" | sort -V -C; then
    [ "$v" = 2.6.1 ] && echo SCRAM-SHA-512 || echo PLAIN
  else
    echo SCRAM-SHA-512
  fi
}

kafka_start() {
  mkdir -p "$kafka_dir" "$dir/logs"
  if pid_alive "$kafka_pid"; then
    wait_for 90 Kafka kafka_ready
    log "Kafka already running on $kafka_port"; return
  fi
  local lib
  lib=$("$here/kafka/assemble.sh" | tail -n1)
  local client=PLAINTEXT controller_proto=PLAINTEXT
  if kafka_sasl; then
    [ -f "$kafka_creds" ] || [ ! -f "$kafka_dir/data/meta.properties" ] ||
      die "STRAND_KAFKA_SASL=1 but $kafka_dir was formatted without SASL; remove it or use another STRAND_STACK_DIR"
    sasl_credentials
    client=SASL_PLAINTEXT controller_proto=SASL_PLAINTEXT
  fi
  cat >"$kafka_dir/server.properties" <<CONF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$controller_port
listeners=$client://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=$client://127.0.0.1:$kafka_port,CONTROLLER://127.0.0.1:$controller_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=$client
listener.security.protocol.map=CONTROLLER:$controller_proto,$client:$client
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
  if kafka_sasl; then
    # Clients and the broker itself: SCRAM-SHA-512 (credentials stored in the cluster
    # metadata at format time). The same users may also log in with PLAIN: librdkafka
    # before 2.6.1 cannot do SCRAM with a Kafka 4.x broker (its client-final nonce is
    # refused, librdkafka#4895), and `env` picks the mechanism the installed librdkafka
    # can use. The controller listener: PLAIN with a static admin user (SCRAM is not
    # available to the KRaft controller). Authorization: ACLs only.
    local admin_pw; admin_pw=$(sasl_password admin)
    chmod 600 "$kafka_dir/server.properties"   # it holds passwords from here on
    ( cat >>"$kafka_dir/server.properties" <<CONF
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin_pw" user_admin="$admin_pw" user_strand="$(sasl_password strand)" user_app="$(sasl_password app)";
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin_pw" user_admin="$admin_pw";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
CONF
    )
  fi
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
    local scram=()
    if kafka_sasl; then
      local u
      for u in admin strand app; do
        scram+=(--add-scram "SCRAM-SHA-512=[name=$u,password=$(sasl_password $u)]")
      done
    fi
    java -Dlog4j2.configurationFile="$kafka_dir/log4j2.yaml" -cp "$lib/*" kafka.tools.StorageTool \
      format --standalone -t "$cluster_id" -c "$kafka_dir/server.properties" "${scram[@]}" \
      >"$dir/logs/kafka-format.log" 2>&1 ||
      die "could not format the Kafka log directory (see $dir/logs/kafka-format.log)"
  fi
  : >"$dir/logs/kafka.log"
  nohup java -Xms256m -Xmx${STRAND_KAFKA_HEAP:-768m} -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$kafka_dir/log4j2.yaml" -cp "$lib/*" \
    kafka.Kafka "$kafka_dir/server.properties" >>"$dir/logs/kafka.log" 2>&1 </dev/null &
  echo $! >"$kafka_pid"
  wait_for 90 Kafka kafka_ready
  if kafka_sasl && [ ! -f "$kafka_dir/acls.done" ]; then
    kafka_acls "$lib" || die "could not create the Kafka ACLs (see $dir/logs/kafka-acls.log)"
    touch "$kafka_dir/acls.done"
  fi
  log "Kafka ready on 127.0.0.1:$kafka_port$(kafka_sasl && echo ' (SASL SCRAM-SHA-512/PLAIN, ACLs)')"
}

# Grants the strand and app principals their ACLs (scripts/kafka/Acls.java, run with
# the broker's client jars as the admin principal). Idempotent.
kafka_acls() {
  local lib=$1
  ( umask 077; cat >"$kafka_dir/admin.properties" <<CONF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(sasl_password admin)";
CONF
  )
  java -Dlog4j2.configurationFile="$kafka_dir/log4j2.yaml" -cp "$lib/*" "$here/kafka/Acls.java" \
    "127.0.0.1:$kafka_port" "$kafka_dir/admin.properties" "$topic_prefix" User:strand User:app \
    >"$dir/logs/kafka-acls.log" 2>&1
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
  if [ -f "$kafka_creds" ]; then
    cat <<ENV
export STRAND_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT
export STRAND_KAFKA_SASL_MECHANISM=$(sasl_mechanism)
export STRAND_KAFKA_SASL_USERNAME=strand
export STRAND_KAFKA_SASL_PASSWORD=$(sasl_password strand)
export STRAND_STACK_KAFKA_APP_USERNAME=app
export STRAND_STACK_KAFKA_APP_PASSWORD=$(sasl_password app)
export STRAND_STACK_KAFKA_ADMIN_USERNAME=admin
export STRAND_STACK_KAFKA_ADMIN_PASSWORD=$(sasl_password admin)
ENV
  fi
}

case "${1:-}" in
  start)
    case "${2:-}" in
      "") pg_start; redis_start; kafka_start ;;
      redis) redis_start ;;
      kafka) kafka_start ;;
      *) echo "usage: $0 start [redis|kafka]" >&2; exit 2 ;;
    esac ;;
  stop)
    case "${2:-}" in
      "") kafka_stop; redis_stop; pg_stop ;;
      redis) redis_stop ;;
      kafka) kafka_stop ;;
      *) echo "usage: $0 stop [redis|kafka]" >&2; exit 2 ;;
    esac ;;
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
