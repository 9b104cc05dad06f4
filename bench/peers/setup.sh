#!/usr/bin/env bash
# Installs the peer engines for bench/compare.sh into .cache/peers (never committed):
#   Restate: the server binary (npm @restatedev/restate-server) and the TypeScript SDK
#            (npm @restatedev/restate-sdk) for the W1/W2 service in bench/peers/restate.
#   DBOS:    DBOS Transact for Python (PyPI dbos) in a virtualenv; it keeps its state in a
#            PostgreSQL database of the strand stack.
# Uses the machine's configured npm and pip registries. Idempotent.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="${STRAND_PEERS_DIR:-$ROOT/.cache/peers}"
RESTATE_VERSION="${RESTATE_VERSION:-latest}"
DBOS_VERSION="${DBOS_VERSION:-}"
mkdir -p "$PEERS/restate" "$PEERS/dbos"

echo "== restate -> $PEERS/restate"
cp "$ROOT/bench/peers/restate/package.json" "$PEERS/restate/"
(cd "$PEERS/restate" &&
  npm install --no-audit --no-fund --omit-lockfile-registry-resolved \
    "@restatedev/restate-server@$RESTATE_VERSION" "@restatedev/restate-sdk@$RESTATE_VERSION" \
    undici)
ls "$PEERS/restate/node_modules/.bin/" | grep -i restate || true

echo "== dbos -> $PEERS/dbos"
if [ ! -x "$PEERS/dbos/venv/bin/python" ]; then python3 -m venv "$PEERS/dbos/venv"; fi
"$PEERS/dbos/venv/bin/pip" install -q --upgrade pip
if [ -n "$DBOS_VERSION" ]; then spec="dbos==$DBOS_VERSION"; else spec="dbos"; fi
"$PEERS/dbos/venv/bin/pip" install -q "$spec" "psycopg[binary]"
"$PEERS/dbos/venv/bin/python" -c 'import dbos, importlib.metadata as m; print("dbos", m.version("dbos"))'
echo "peers installed in $PEERS"
