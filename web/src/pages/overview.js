// Overview: what an on-call operator checks first (GET /v1/overview, the stuck list,
// and the API's own /metrics for its consumer lag).
import { useEffect, useState } from 'preact/hooks';
import { api, problemText } from '../api.js';
import { html, ErrorBox, can } from '../ui.js';

function Chart({ rows }) {
  const w = 600, hgt = 140, pad = 20;
  const max = Math.max(1, ...rows.map((r) => Math.max(r.started, r.completed, r.failed)));
  const bw = (w - pad) / rows.length / 3;
  const y = (v) => hgt - pad - ((hgt - 2 * pad) * v) / max;
  return html`<figure>
    <svg class="chart" viewBox=${`0 0 ${w} ${hgt}`} role="img" aria-labelledby="chart-title">
      <title id="chart-title">Instances started, completed and failed per minute, last 30 minutes (highest ${max})</title>
      ${rows.map((r, i) => {
        const x = pad + i * bw * 3;
        return html`<g>
          <rect class="bar-started" x=${x} y=${y(r.started)} width=${bw - 1} height=${hgt - pad - y(r.started)}><title>${r.minute}: ${r.started} started</title></rect>
          <rect class="bar-completed" x=${x + bw} y=${y(r.completed)} width=${bw - 1} height=${hgt - pad - y(r.completed)}><title>${r.minute}: ${r.completed} completed</title></rect>
          <rect class="bar-failed" x=${x + 2 * bw} y=${y(r.failed)} width=${bw - 1} height=${hgt - pad - y(r.failed)}><title>${r.minute}: ${r.failed} failed</title></rect>
        </g>`;
      })}
      <line x1=${pad} x2=${w} y1=${hgt - pad} y2=${hgt - pad} class="axis" />
      <text x=${pad} y=${hgt - 4} class="axis-label">-30 min</text>
      <text x=${w - 40} y=${hgt - 4} class="axis-label">now</text>
    </svg>
    <figcaption><span class="key key-started"></span> started <span class="key key-completed"></span> completed <span class="key key-failed"></span> failed</figcaption>
  </figure>`;
}

function Card({ label, value, href, warn }) {
  const body = html`<span class="card-value">${value}</span><span class="card-label">${label}</span>`;
  return html`<li class=${'card' + (warn ? ' warn' : '')}>${href ? html`<a href=${href}>${body}</a>` : body}</li>`;
}

function lagFromMetrics(text) {
  const lags = [];
  for (const line of text.split('\n')) {
    const m = line.match(/^strand_kafka_consumer_lag_messages\{([^}]*)\}\s+([0-9.eE+-]+)/);
    if (m) lags.push({ labels: m[1], value: Number(m[2]) });
  }
  return lags;
}

export function Overview() {
  const [ov, setOv] = useState(null);
  const [stuck, setStuck] = useState(null);
  const [lags, setLags] = useState([]);
  const [error, setError] = useState(null);
  const load = async () => {
    const r = await api('GET', '/v1/overview');
    if (r.ok) { setOv(r.data); setError(null); } else setError(problemText(r));
    const s = await api('GET', '/v1/instances/stuck?limit=100');
    setStuck(s.ok ? { n: (s.data.items || []).length, more: !!s.data.next_cursor } : { error: problemText(s) });
    const m = await api('GET', '/metrics', undefined, { text: true });
    if (m.ok) setLags(lagFromMetrics(m.data));
  };
  useEffect(() => {
    load();
    const t = setInterval(load, 10000);
    return () => clearInterval(t);
  }, []);
  const sum = (k) => (ov ? ov.per_minute.reduce((a, r) => a + r[k], 0) : 0);
  return html`<h1>Overview</h1>
    <${ErrorBox} error=${error && (can('instances:read') ? error : 'Your principal may not read instances (instances:read).')} />
    ${ov && html`
      <ul class="cards" aria-label="Health">
        <${Card} label="stuck instances" value=${stuck ? (stuck.error ? '?' : stuck.n + (stuck.more ? '+' : '')) : '…'} warn=${stuck && stuck.n > 0} href="/ui/instances?stuck=1" />
        <${Card} label="dead letters open" value=${ov.dead_letters_open} warn=${ov.dead_letters_open > 0} href="/ui/dead-letters" />
        <${Card} label="outbox backlog (oldest ${Math.round(ov.outbox_oldest_age_s)} s)" value=${ov.outbox_backlog} warn=${ov.outbox_oldest_age_s > 30} />
        <${Card} label="timers overdue (latest ${ov.timer_lateness_max_s.toFixed(1)} s late)" value=${ov.timers_overdue} warn=${ov.timer_lateness_max_s > 30} />
        <${Card} label="average timer lateness, 10 min" value=${ov.timer_lateness_recent_avg_s.toFixed(2) + ' s'} />
        <${Card} label="open tasks" value=${ov.tasks_open} href="/ui/inbox" />
        <${Card} label="waiting instances" value=${ov.waiting} href="/ui/instances?status=waiting" />
      </ul>
      ${stuck && stuck.error && html`<p class="muted">Stuck list: ${stuck.error}</p>`}
      <h2>Last 30 minutes</h2>
      <p>${sum('started')} started, ${sum('completed')} completed, ${sum('failed')} failed (as of ${ov.at}).</p>
      <${Chart} rows=${ov.per_minute} />
      <h2>Consumer lag</h2>
      ${lags.length === 0 ? html`<p class="muted">This API node exports no consumer lag (the executor's is on its own /metrics).</p>`
        : html`<table><thead><tr><th scope="col">consumer</th><th scope="col">messages behind</th></tr></thead>
          <tbody>${lags.map((l) => html`<tr><td>${l.labels}</td><td>${l.value}</td></tr>`)}</tbody></table>`}
    `}`;
}
