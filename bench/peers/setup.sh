#!/usr/bin/env bash
# Installs the peer engines for bench/compare.sh into .cache/peers (never committed):
#   Restate: the server binary (npm @restatedev/restate-server) and the TypeScript SDK
#            (npm @restatedev/restate-sdk) for the W1/W2 service in bench/peers/restate.
#   DBOS:    DBOS Transact for Python (PyPI dbos) in a virtualenv; it keeps its state in a
#            PostgreSQL database of the strand stack.
#   Temporal: the server (go.temporal.io/server/cmd/server), its schema tool
#            temporal-sql-tool (cmd/tools/sql) and temporal-bench (bench/peers/temporal:
#            the W1/W2/W3 workflows on the Go SDK go.temporal.io/sdk), built with the
#            machine's Go from the Go module proxy at the versions bench/peers/temporal/go.mod
#            pins (server v1.32.1 needs Go >= 1.26.8; 6-12 minutes on 2 cores, the first time).
#            TEMPORAL_BUILD_P limits the parallel compile jobs (default: the number of cores).
#
#   bench/peers/setup.sh [restate] [dbos] [temporal]   (default: all three)
# Uses the machine's configured npm, pip and Go module registries. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="${STRAND_PEERS_DIR:-$ROOT/.cache/peers}"
RESTATE_VERSION="${RESTATE_VERSION:-latest}"
DBOS_VERSION="${DBOS_VERSION:-}"
want=" ${*:-restate dbos temporal} "
mkdir -p "$PEERS/restate" "$PEERS/dbos" "$PEERS/temporal/bin"

if [[ $want == *" restate "* ]]; then
echo "== restate -> $PEERS/restate"
cp "$ROOT/bench/peers/restate/package.json" "$PEERS/restate/"
(cd "$PEERS/restate" &&
  npm install --no-audit --no-fund --omit-lockfile-registry-resolved \
    "@restatedev/restate-server@$RESTATE_VERSION" "@restatedev/restate-sdk@$RESTATE_VERSION" \
    undici)
ls "$PEERS/restate/node_modules/.bin/" | grep -i restate || true
fi

if [[ $want == *" dbos "* ]]; then
echo "== dbos -> $PEERS/dbos"
if [ ! -x "$PEERS/dbos/venv/bin/python" ]; then python3 -m venv "$PEERS/dbos/venv"; fi
"$PEERS/dbos/venv/bin/pip" install -q --upgrade pip
if [ -n "$DBOS_VERSION" ]; then spec="dbos==$DBOS_VERSION"; else spec="dbos"; fi
"$PEERS/dbos/venv/bin/pip" install -q "$spec" "psycopg[binary]"
"$PEERS/dbos/venv/bin/python" -c 'import dbos, importlib.metadata as m; print("dbos", m.version("dbos"))'
fi

if [[ $want == *" temporal "* ]]; then
echo "== temporal -> $PEERS/temporal"
command -v go >/dev/null || { echo "temporal: no go on PATH (server v1.32.1 needs Go >= 1.26.8)" >&2; exit 1; }
# never download another toolchain: a Go older than go.mod asks for fails here, saying so
export GOTOOLCHAIN=local
export GOFLAGS="-buildvcs=false -p=${TEMPORAL_BUILD_P:-$(nproc)}"
src="$ROOT/bench/peers/temporal"
bin="$PEERS/temporal/bin"
(cd "$src" &&
  go build -o "$bin/temporal-sql-tool" go.temporal.io/server/cmd/tools/sql &&
  go build -o "$bin/temporal-server" go.temporal.io/server/cmd/server &&
  go build -o "$bin/temporal-bench" .)
"$bin/temporal-sql-tool" --version
fi
echo "peers installed in $PEERS"
