#!/usr/bin/env bash
# W1 alone: Strand's throughput and the machine's CPU seconds per instance, round by
# round, to compare two trees (a refactoring must not move them past the run-to-run
# spread). The same W1 and the same CPU accounting as bench/compare.sh, without the
# peers, the other workloads or the doc.
#
#   bench/w1_cpu.sh [BUILD_DIR]      (default build/; release)
#
# Environment: STRAND_BENCH_N_W1 (5000), STRAND_BENCH_ROUNDS (5), STRAND_BENCH_WARMUP_N
# (2000), STRAND_BENCH_CONCURRENCY (16), STRAND_BENCH_PORT_BASE (28180); the stack of
# scripts/stack.sh (started if not running). Prints one line per round and the medians.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
BUILD=$(cd "${1:-build}" && pwd)
N=${STRAND_BENCH_N_W1:-5000} ROUNDS=${STRAND_BENCH_ROUNDS:-5} WARM=${STRAND_BENCH_WARMUP_N:-2000}
C=${STRAND_BENCH_CONCURRENCY:-16} PB=${STRAND_BENCH_PORT_BASE:-28180}
work=${STRAND_STACK_DIR:-$repo/.stack}/w1cpu
rm -rf "$work" && mkdir -p "$work"
scripts/stack.sh start >&2
eval "$(scripts/stack.sh env)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
port=$PB
for s in api executor scheduler monitor; do
  STRAND_HTTP_PORT=$port STRAND_NODE_ID=w1cpu-$s nohup "$BUILD/services/$s/strand-$s" >"$work/$s.log" 2>&1 </dev/null &
  pids+=($!)
  deadline=$((SECONDS + 90))
  until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "w1_cpu: $s not ready (see $work/$s.log)" >&2; exit 1; }
    sleep 0.2
  done
  port=$((port + 1))
done
export STRAND_API_URL=http://127.0.0.1:$PB
. "$repo/bench/cpu_ticks.sh"
echo "w1_cpu: $(git describe --always --dirty), load $(cut -d' ' -f1-3 /proc/loadavg), warm-up $WARM, $ROUNDS rounds of $N, concurrency $C" >&2
"$BUILD/bench/strand-bench" --json --workload w1 --n "$WARM" --concurrency "$C" --label warmup --timeout 600 >/dev/null
hz=$(getconf CLK_TCK)
for r in $(seq 1 "$ROUNDS"); do
  m0=$(machine_ticks)
  line=$("$BUILD/bench/strand-bench" --json --workload w1 --n "$N" --concurrency "$C" --label main --timeout 600 | tail -n1)
  m1=$(machine_ticks)
  python3 -c 'import json, sys; d = json.loads(sys.argv[1]); cpu = (int(sys.argv[3]) - int(sys.argv[2])) / float(sys.argv[4]); n = int(sys.argv[5]); print(json.dumps({"round": int(sys.argv[6]), "inst_per_s": round(d.get("throughput_per_s", d.get("rate", 0)), 1), "machine_cpu_ms_per_instance": round(cpu / n * 1000, 3)}))' \
    "$line" "$m0" "$m1" "$hz" "$N" "$r" | tee -a "$work/rounds.jsonl"
done
python3 - "$work/rounds.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rate = [r["inst_per_s"] for r in rows]; cpu = [r["machine_cpu_ms_per_instance"] for r in rows]
print(f"median {statistics.median(rate):.1f} inst/s (rounds {rate}); median {statistics.median(cpu):.3f} ms machine CPU per instance (rounds {cpu}, spread {min(cpu):.3f}-{max(cpu):.3f})")
PY
