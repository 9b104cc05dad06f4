// Driver for the Restate W1/W2/W3 (bench/peers/restate/service.mjs) through the Restate
// ingress, measured the same way as strand-bench:
//   node bench.mjs --workload w1|w2|w3 --n N --concurrency C [--timeout S] [--json]
//                  [--window-ms MS] [--lead-ms MS]
// Env: RESTATE_INGRESS (http://127.0.0.1:8080), RESTATE_ADMIN (http://127.0.0.1:9070).
// W1: C clients call POST /w1/<key>/run (request/response); latency: client send ->
//     the time taken at the end of the workflow's last step; rate: completed /
//     (last end - first send).
// W2: submit N workflows (POST /w2/<key>/run/send), wait until the server reports all
//     of them suspended on the promise, then C clients call POST /w2/<key>/go; latency:
//     client send -> the time taken when the workflow resumed (read with .../attach).
// W3: C clients submit N workflows (POST /t3/<key>/run/send), each sleeping on a durable
//     timer (ctx.sleep) due evenly over --window-ms starting --lead-ms (default: from a
//     probe of the submit rate) after the first submit; lateness: the time taken right after the sleep returned - due time.
import { Agent, setGlobalDispatcher } from "undici";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : true]);
    return acc;
  }, []));
const workload = args.workload, n = Number(args.n || 1000), conc = Number(args.concurrency || 16);
const deadline = Date.now() + Number(args.timeout || 300) * 1000;
const ingress = process.env.RESTATE_INGRESS || "http://127.0.0.1:8080";
const admin = process.env.RESTATE_ADMIN || "http://127.0.0.1:9070";
setGlobalDispatcher(new Agent({ connections: conc + 4, keepAliveTimeout: 60000 }));

async function post(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`${url}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function pool(count, fn) {
  let next = 0;
  await Promise.all(Array.from({ length: conc }, async () => {
    for (;;) {
      const i = next++;
      if (i >= count || Date.now() > deadline) return;
      try { await fn(i); } catch (e) { console.error(String(e)); }
    }
  }));
}

function pct(v, p) { return v.length ? v[Math.floor(p * (v.length - 1) + 0.5)] : 0; }

function report(unit, what, lat, rate, extra = {}) {
  lat.sort((a, b) => a - b);
  const row = { engine: "restate", workload, label: args.label || "", n, completed: lat.length, concurrency: conc,
    rate: Math.round(rate * 10) / 10, rate_unit: unit, p50_ms: pct(lat, .5), p95_ms: pct(lat, .95),
    p99_ms: pct(lat, .99), max_ms: lat.length ? lat[lat.length - 1] : 0, ...extra };
  if (args.json) console.log(JSON.stringify(row));
  else {
    console.log(`${workload} ${what} n=${n} completed=${lat.length} concurrency=${conc}`);
    console.log(`     ${unit.padEnd(10)} ${"rate".padStart(10)} ${"p50 ms".padStart(9)} ${"p95 ms".padStart(9)} ${"p99 ms".padStart(9)} ${"max ms".padStart(9)}`);
    console.log(`     ${"".padEnd(10)} ${row.rate.toFixed(1).padStart(10)} ${[row.p50_ms, row.p95_ms, row.p99_ms, row.max_ms].map((x) => x.toFixed(2).padStart(9)).join(" ")}`);
  }
  return lat.length === n;
}

function summarize(sends, ends) {
  const lat = [], done = [];
  sends.forEach((s, i) => { if (s > 0 && ends[i] > 0) { lat.push(ends[i] - s); done.push(ends[i]); } });
  const first = Math.min(...sends.filter((s) => s > 0));
  const rate = done.length ? done.length / ((Math.max(...done) - first) / 1000) : 0;
  return [lat, rate];
}

async function suspended(tag) {
  const q = `SELECT count(*) AS c FROM sys_invocation WHERE target_service_name = 'w2' AND target_service_key LIKE '${tag}-%' AND status = 'suspended'`;
  const r = await fetch(`${admin}/query`, { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body: JSON.stringify({ query: q }) });
  if (!r.ok) throw new Error(`admin query: ${r.status} ${await r.text()}`);
  const j = await r.json();
  return Number(j.rows[0].c);
}

const tag = Math.random().toString(16).slice(2, 10);
const sends = new Array(n).fill(0), ends = new Array(n).fill(0);
let ok;
if (workload === "w1") {
  await pool(n, async (i) => {
    sends[i] = Date.now();
    const out = await post(`${ingress}/w1/${tag}-${i}/run`, { i });
    ends[i] = out.t_end;
  });
  const [lat, rate] = summarize(sends, ends);
  ok = report("inst/s", "3 ctx.run steps, call -> last step", lat, rate);
} else if (workload === "w2") {
  await pool(n, async (i) => { await post(`${ingress}/w2/${tag}-${i}/run/send`, {}); });
  let s = 0;
  while ((s = await suspended(tag)) < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  if (s < n) console.error(`only ${s} of ${n} workflows suspended`);
  await pool(n, async (i) => {
    const t = Date.now();
    await post(`${ingress}/w2/${tag}-${i}/go`, { v: 1 });
    sends[i] = t;
  });
  await pool(n, async (i) => {
    if (sends[i] === 0) return;
    const r = await fetch(`${ingress}/restate/workflow/w2/${tag}-${i}/attach`);
    if (r.ok) ends[i] = (await r.json()).t_resumed;
  });
  const [lat, rate] = summarize(sends, ends);
  ok = report("resumes/s", "promise resolved -> workflow resumed", lat, rate);
} else if (workload === "w3") {
  // the lead leaves time to submit every timer before it is due: --lead-ms, or 2 s +
  // 1.5 x N / the rate of an untimed probe of min(100, max(10, N/20)) timers due at once,
  // each submitted and awaited to its end
  const windowMs = Number(args["window-ms"] || 20000);
  let leadMs = Number(args["lead-ms"] || 0), probeRate = 0;
  if (leadMs <= 0) {
    const probe = Math.min(100, Math.max(10, Math.floor(n / 20))), t0 = Date.now();
    await pool(probe, async (i) => {
      await post(`${ingress}/t3/${tag}-probe-${i}/run/send`, { due: Date.now() });
      await fetch(`${ingress}/restate/workflow/t3/${tag}-probe-${i}/attach`).then((r) => r.text());
    });
    probeRate = probe / Math.max((Date.now() - t0) / 1000, 0.001);
    leadMs = 2000 + Math.round(1.5 * n / probeRate * 1000);
  }
  const base = Date.now() + leadMs, due = Array.from({ length: n }, (_, i) => base + i * windowMs / n);
  const fired = new Array(n).fill(0);
  let late = 0, setLate = 0;
  await pool(n, async (i) => {
    await post(`${ingress}/t3/${tag}-${i}/run/send`, { due: due[i] });
    if (Date.now() > due[i]) late++;
  });
  if (late) console.error(`${late} of ${n} timers were submitted after they were due (raise --lead-ms)`);
  const wait = base + windowMs - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  await pool(n, async (i) => {
    const r = await fetch(`${ingress}/restate/workflow/t3/${tag}-${i}/attach`);
    if (!r.ok) return;
    const out = await r.json();
    fired[i] = out.t_fired;
    if (out.t_set > due[i]) setLate++;
  });
  const lat = [];
  fired.forEach((f, i) => { if (f > 0) lat.push(f - due[i]); });
  ok = report("timers/s", "durable sleep lateness (after sleep - due)", lat, n * 1000 / windowMs,
    { window_ms: windowMs, lead_ms: leadMs, started_late: late, timer_set_late: setLate, probe_starts_per_s: Math.round(probeRate * 10) / 10, fired_by: "time taken right after ctx.sleep returned" });
} else {
  console.error("--workload w1|w2|w3");
  process.exit(2);
}
process.exit(ok ? 0 : 1);
