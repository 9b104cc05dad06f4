"""DBOS Transact (Python) equivalents of strand-bench W1, W2 and W3, measured the same way.

  python bench.py --workload w1|w2|w3 --n N --concurrency C [--timeout S] [--json]
                  [--window-ms MS] [--lead-ms MS]

Needs DBOS_SYSTEM_DATABASE_URL (a PostgreSQL database of the strand stack; DBOS creates
its schema there). The workflows run in this process, as DBOS applications do.

W1: a workflow of three @DBOS.step steps (the step outputs are checkpointed in
PostgreSQL), called by C client threads. Latency: client call -> timestamp taken at the
end of the workflow's last step; rate: completed / (last end - first call).
W2: N workflows wait in DBOS.recv("go"); once all have reached the wait, C threads send
the messages with DBOS.send. Latency: client send -> timestamp taken right after recv
returns (the workflow then completes). --async runs the same workflows as async
functions on one event loop (W2: DBOS.recv_async) instead of a thread per call.
W3: N async workflows each sleep on a durable timer (DBOS.sleep_async, which checkpoints
its wake-up time) due evenly over --window-ms starting --lead-ms from now (default: from
a probe of the start rate); lateness: the
time taken right after the sleep returned - due time. (Always async: a sleeping sync
workflow holds a thread.)
"""
import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from dbos import DBOS, DBOSConfig, SetWorkflowID


def now_ms() -> float:
    return time.time() * 1000.0


@DBOS.step()
def step_a(i: int) -> int:
    return i + 1


@DBOS.step()
def step_b(x: int) -> int:
    return x * 2


@DBOS.step()
def step_c(y: int) -> dict:
    return {"y": y, "t_end": now_ms()}


@DBOS.workflow()
def w1_flow(i: int) -> dict:
    return step_c(step_b(step_a(i)))


@DBOS.step()
async def step_a_async(i: int) -> int:
    return i + 1


@DBOS.step()
async def step_b_async(x: int) -> int:
    return x * 2


@DBOS.step()
async def step_c_async(y: int) -> dict:
    return {"y": y, "t_end": now_ms()}


@DBOS.workflow()
async def w1_flow_async(i: int) -> dict:
    return await step_c_async(await step_b_async(await step_a_async(i)))


_waiting = 0
_waiting_mu = threading.Lock()


@DBOS.step()
def mark_waiting() -> None:
    global _waiting
    with _waiting_mu:
        _waiting += 1


@DBOS.workflow()
def w2_flow() -> dict:
    mark_waiting()
    v = DBOS.recv("go", timeout_seconds=600)
    return {"got": v, "t_resumed": now_ms()}


@DBOS.step()
async def mark_waiting_async() -> None:
    global _waiting
    with _waiting_mu:
        _waiting += 1


@DBOS.workflow()
async def w2_flow_async() -> dict:
    await mark_waiting_async()
    v = await DBOS.recv_async("go", timeout_seconds=600)
    return {"got": v, "t_resumed": now_ms()}


@DBOS.workflow()
async def t3_flow(due_ms: float) -> dict:
    # the duration is computed once: DBOS.sleep_async checkpoints the wake-up time on its
    # first call, so a recovered workflow sleeps until the same time
    t_set = now_ms()
    await DBOS.sleep_async(max(0.001, (due_ms - t_set) / 1000.0))
    return {"t_fired": now_ms(), "t_set": t_set}


def pct(v, p):
    if not v:
        return 0.0
    return v[int(p * (len(v) - 1) + 0.5)]


def report(args, what, unit, lat, rate, extra=None):
    lat.sort()
    row = {"engine": "dbos", "workload": args.workload, "label": args.label, "n": args.n,
           "completed": len(lat), "concurrency": args.concurrency, "rate": round(rate, 1),
           "rate_unit": unit, "p50_ms": round(pct(lat, .5), 2), "p95_ms": round(pct(lat, .95), 2),
           "p99_ms": round(pct(lat, .99), 2), "max_ms": round(lat[-1] if lat else 0, 2),
           "variant": "async" if args.use_async else "threads"}
    if args.workload == "w3":
        del row["variant"]
    row.update(extra or {})
    if args.json:
        print(json.dumps(row), flush=True)
    else:
        print(f"{args.workload} {what} n={args.n} completed={len(lat)} concurrency={args.concurrency}")
        print(f"     {unit:10s} {'rate':>10s} {'p50 ms':>9s} {'p95 ms':>9s} {'p99 ms':>9s} {'max ms':>9s}")
        print(f"     {'':10s} {rate:10.1f} {row['p50_ms']:9.2f} {row['p95_ms']:9.2f} {row['p99_ms']:9.2f} {row['max_ms']:9.2f}",
              flush=True)


def run_w1(args, deadline):
    sends, ends = [0.0] * args.n, [0.0] * args.n

    def one(i):
        if time.time() > deadline:
            return
        sends[i] = now_ms()
        ends[i] = w1_flow(i)["t_end"]

    with ThreadPoolExecutor(max_workers=args.concurrency) as ex:
        list(ex.map(one, range(args.n)))
    lat = [e - s for s, e in zip(sends, ends) if e > 0]
    done = [e for e in ends if e > 0]
    first = min(s for s in sends if s > 0)
    rate = len(done) / ((max(done) - first) / 1000.0) if done else 0.0
    report(args, "3 checkpointed steps, call -> last step", "inst/s", lat, rate)
    return len(lat) == args.n


def run_w2(args, deadline):
    tag = uuid.uuid4().hex[:8]
    ids = [f"w2-{tag}-{i}" for i in range(args.n)]
    handles = []
    for wid in ids:
        with SetWorkflowID(wid):
            handles.append(DBOS.start_workflow(w2_flow))
    while _waiting < args.n and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # let the last ones enter recv after their checkpoint
    sends = [0.0] * args.n

    def sig(i):
        if time.time() > deadline:
            return
        sends[i] = now_ms()
        DBOS.send(ids[i], {"v": 1}, "go")

    with ThreadPoolExecutor(max_workers=args.concurrency) as ex:
        list(ex.map(sig, range(args.n)))
    lat, ends = [], []
    for i, h in enumerate(handles):
        left = deadline - time.time()
        if left <= 0 or sends[i] == 0:
            continue
        r = h.get_result()
        ends.append(r["t_resumed"])
        lat.append(r["t_resumed"] - sends[i])
    first = min(s for s in sends if s > 0)
    rate = len(ends) / ((max(ends) - first) / 1000.0) if ends else 0.0
    report(args, "send -> recv returned", "resumes/s", lat, rate)
    return len(lat) == args.n


async def run_w1_async(args, deadline):
    sends, ends = [0.0] * args.n, [0.0] * args.n
    sem = asyncio.Semaphore(args.concurrency)

    async def one(i):
        async with sem:
            if time.time() > deadline:
                return
            sends[i] = now_ms()
            ends[i] = (await w1_flow_async(i))["t_end"]

    await asyncio.gather(*(one(i) for i in range(args.n)))
    lat = [e - s for s, e in zip(sends, ends) if e > 0]
    done = [e for e in ends if e > 0]
    first = min(s for s in sends if s > 0)
    rate = len(done) / ((max(done) - first) / 1000.0) if done else 0.0
    report(args, "3 checkpointed async steps, call -> last step", "inst/s", lat, rate)
    return len(lat) == args.n


async def run_w2_async(args, deadline):
    """W2 with async workflows (DBOS.recv_async on the event loop): no thread per
    waiting workflow."""
    tag = uuid.uuid4().hex[:8]
    ids = [f"w2a-{tag}-{i}" for i in range(args.n)]
    handles = []
    for wid in ids:
        with SetWorkflowID(wid):
            handles.append(await DBOS.start_workflow_async(w2_flow_async))
    while _waiting < args.n and time.time() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    sends = [0.0] * args.n
    sem = asyncio.Semaphore(args.concurrency)

    async def sig(i):
        async with sem:
            if time.time() > deadline:
                return
            sends[i] = now_ms()
            await DBOS.send_async(ids[i], {"v": 1}, "go")

    await asyncio.gather(*(sig(i) for i in range(args.n)))
    lat, ends = [], []
    for i, h in enumerate(handles):
        if deadline - time.time() <= 0 or sends[i] == 0:
            continue
        r = await h.get_result()
        ends.append(r["t_resumed"])
        lat.append(r["t_resumed"] - sends[i])
    first = min(s for s in sends if s > 0)
    rate = len(ends) / ((max(ends) - first) / 1000.0) if ends else 0.0
    report(args, "send -> recv_async returned", "resumes/s", lat, rate)
    return len(lat) == args.n


async def run_w3(args, deadline):
    tag = uuid.uuid4().hex[:8]
    sem = asyncio.Semaphore(args.concurrency)
    lead, probe_rate = args.lead_ms, 0.0
    if lead <= 0:
        # the lead leaves time to start every timer before it is due: 2 s + 1.5 x N / the
        # rate of an untimed probe of min(100, max(10, N/20)) timers due at once, each
        # started and awaited to its end
        probe = min(100, max(10, args.n // 20))

        async def start_probe(i):
            async with sem:
                with SetWorkflowID(f"t3-{tag}-probe-{i}"):
                    h = await DBOS.start_workflow_async(t3_flow, now_ms())
                await h.get_result()
        t0 = now_ms()
        await asyncio.gather(*(start_probe(i) for i in range(probe)))
        probe_rate = probe / max((now_ms() - t0) / 1000.0, 0.001)
        lead = 2000 + int(1.5 * args.n / probe_rate * 1000)
    base = now_ms() + lead
    due = [base + i * args.window_ms / args.n for i in range(args.n)]
    handles = [None] * args.n
    late = 0

    async def start(i):
        nonlocal late
        async with sem:
            if time.time() > deadline:
                return
            with SetWorkflowID(f"t3-{tag}-{i}"):
                handles[i] = await DBOS.start_workflow_async(t3_flow, due[i])
            if now_ms() > due[i]:
                late += 1

    await asyncio.gather(*(start(i) for i in range(args.n)))
    if late:
        print(f"{late} of {args.n} timers were started after they were due (raise --lead-ms)", file=sys.stderr)
    lat, set_late = [], 0
    for i, h in enumerate(handles):
        if h is None or deadline - time.time() <= 0:
            continue
        r = await h.get_result()
        lat.append(r["t_fired"] - due[i])
        set_late += r["t_set"] > due[i]
    report(args, "durable sleep lateness (after sleep - due)", "timers/s", lat,
           args.n * 1000.0 / args.window_ms,
           {"window_ms": args.window_ms, "lead_ms": lead, "started_late": late, "timer_set_late": set_late,
            "probe_starts_per_s": round(probe_rate, 1),
            "fired_by": "time taken right after DBOS.sleep_async returned"})
    return len(lat) == args.n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=["w1", "w2", "w3"], required=True)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--async", dest="use_async", action="store_true",
                    help="async workflows and steps on one event loop (W2: recv_async) instead of threads")
    ap.add_argument("--window-ms", type=int, default=20000, help="w3: timers due evenly over this window")
    ap.add_argument("--lead-ms", type=int, default=0,
                    help="w3: the first timer is due this long after the start (0: from a probe of the start rate)")
    args = ap.parse_args()
    url = os.environ.get("DBOS_SYSTEM_DATABASE_URL")
    if not url:
        print("set DBOS_SYSTEM_DATABASE_URL", file=sys.stderr)
        return 2
    config: DBOSConfig = {"name": "strand-bench-peer", "system_database_url": url,
                          "log_level": "WARNING", "sys_db_pool_size": max(20, args.concurrency + 4)}
    DBOS(config=config)
    DBOS.launch()
    deadline = time.time() + args.timeout
    try:
        if args.workload == "w3":
            ok = asyncio.run(run_w3(args, deadline))
        elif args.workload == "w1" and args.use_async:
            ok = asyncio.run(run_w1_async(args, deadline))
        elif args.workload == "w1":
            ok = run_w1(args, deadline)
        elif args.workload == "w2" and args.use_async:
            ok = asyncio.run(run_w2_async(args, deadline))
        else:
            ok = run_w2(args, deadline)
    finally:
        DBOS.destroy(destroy_registry=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
