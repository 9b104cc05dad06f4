// Instances: filters in the URL (shareable), counts per status, cursor pages, and bulk
// actions over the selected instances or over all that match (POST /v1/batches).
import { useEffect, useState } from 'preact/hooks';
import { api, qs, problemText } from '../api.js';
import { html, ErrorBox, Time, Status, Pager, usePaged, navigate, useLocation, can, Confirm } from '../ui.js';

const STATUSES = ['pending', 'running', 'waiting', 'paused', 'completed', 'failed', 'cancelled', 'terminated'];
const FILTERS = ['definition', 'version', 'status', 'business_ref', 'created_after', 'created_before'];
const ACTIONS = [
  ['cancel', 'instances:operate', 'ends each instance as cancelled, with its open tasks, calls and children'],
  ['terminate', 'instances:terminate', 'ends each instance as terminated at once, with its open tasks, calls and children'],
  ['retry', 'instances:operate', 'runs each failed instance again from the step that failed'],
  ['pause', 'instances:operate', 'pauses each instance: what arrives meanwhile is kept and applied on resume'],
  ['resume', 'instances:operate', 'resumes each paused instance, applying what arrived meanwhile in order'],
  ['signal', 'instances:signal', 'sends the named signal with the payload to each instance'],
];

// datetime-local (local time) to an ISO 8601 UTC time, and back.
const toIso = (v) => (v ? new Date(v).toISOString() : '');
const fromIso = (v) => {
  if (!v) return '';
  const d = new Date(v);
  if (isNaN(d)) return '';
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}`;
};

// Instances waiting on something that cannot arrive, or whose last wake-up failed
// (GET /v1/instances/stuck), linked from the overview.
function Stuck() {
  const [list, page] = usePaged(async (cursor) => {
    const r = await api('GET', '/v1/instances/stuck' + qs({ limit: 100, cursor }));
    return r.ok ? { ok: true, items: r.data.items, next: r.data.next_cursor } : { ok: false, error: problemText(r) };
  }, []);
  return html`<h1>Stuck instances</h1>
    <p><a href="/ui/instances">All instances</a></p>
    <${ErrorBox} error=${list.error} />
    <table class="list">
      <caption class="sr-only">Stuck instances</caption>
      <thead><tr><th scope="col">Instance</th><th scope="col">Definition</th><th scope="col">Status</th><th scope="col">Reason</th><th scope="col">Waits for</th><th scope="col">Since</th></tr></thead>
      <tbody>${list.items.map((i) => html`<tr>
        <td><a class="mono" href=${'/ui/instances/' + i.instance_id}>${i.instance_id}</a></td>
        <td>${i.definition} v${i.version}</td><td><${Status} status=${i.status} /></td><td>${i.reason}</td>
        <td>${i.waiting_kind || '—'}</td><td><${Time} at=${i.since} /></td></tr>`)}</tbody>
    </table>
    ${!list.loading && list.items.length === 0 && !list.error && html`<p>No instance is stuck.</p>`}
    <${Pager} cursors=${list.cursors} next=${list.next} onPage=${page} />`;
}

export function Instances() {
  const loc = useLocation();
  return loc.query.get('stuck') ? html`<${Stuck} />` : html`<${InstanceList} loc=${loc} />`;
}

function InstanceList({ loc }) {
  const filter = {};
  for (const k of FILTERS) if (loc.query.get(k)) filter[k] = loc.query.get(k);
  const key = JSON.stringify(filter);
  const [form, setForm] = useState(filter);
  const [defs, setDefs] = useState([]);
  const [counts, setCounts] = useState(null);
  const [selected, setSelected] = useState(new Set());
  const [allMatching, setAllMatching] = useState(false);
  const loadCounts = () => {
    const { status, ...rest } = filter;
    api('GET', '/v1/instance-counts' + qs(rest)).then((r) => setCounts(r.ok ? r.data : { error: problemText(r) }));
  };
  useEffect(() => {
    setForm(filter);
    setSelected(new Set());
    setAllMatching(false);
    loadCounts();
  }, [key]);
  useEffect(() => {
    api('GET', '/v1/definitions?limit=500').then((r) => r.ok && setDefs([...new Set(r.data.items.map((d) => d.name))]));
  }, []);
  const [list, page, reload] = usePaged(async (cursor) => {
    const r = await api('GET', '/v1/instances' + qs({ ...filter, limit: 50, cursor }));
    if (!r.ok) return { ok: false, error: problemText(r) };
    return { ok: true, items: r.data.items, next: r.data.next_cursor };
  }, [key]);
  const apply = (e) => {
    e.preventDefault();
    const q = {};
    for (const k of FILTERS) if (form[k]) q[k] = form[k];
    navigate('/ui/instances' + qs(q));
  };
  const field = (k) => ({ id: 'f-' + k, name: k, value: form[k] || '', onInput: (e) => setForm({ ...form, [k]: e.target.value }) });
  const toggle = (id) => {
    const s = new Set(selected);
    s.has(id) ? s.delete(id) : s.add(id);
    setSelected(s);
    setAllMatching(false);
  };
  const pageIds = list.items.map((i) => i.id);
  const allOnPage = pageIds.length > 0 && pageIds.every((id) => selected.has(id));
  const matchTotal = counts && !counts.error ? (filter.status ? counts.counts[filter.status] || 0 : counts.total) : null;
  const nSelected = allMatching ? matchTotal : selected.size;
  return html`<h1>Instances</h1>
    <form class="filters" onSubmit=${apply} aria-label="Filter instances">
      <div><label for="f-definition">Definition</label><input ...${field('definition')} list="def-names" /><datalist id="def-names">${defs.map((d) => html`<option value=${d} />`)}</datalist></div>
      <div><label for="f-version">Version</label><input ...${field('version')} inputmode="numeric" size="4" /></div>
      <div><label for="f-status">Status</label><select ...${field('status')} onChange=${(e) => setForm({ ...form, status: e.target.value })}><option value="">any</option>${STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}</select></div>
      <div><label for="f-business_ref">Business reference</label><input ...${field('business_ref')} /></div>
      <div><label for="f-created_after">Created after</label><input type="datetime-local" id="f-created_after" value=${fromIso(form.created_after)} onInput=${(e) => setForm({ ...form, created_after: toIso(e.target.value) })} /></div>
      <div><label for="f-created_before">Created before</label><input type="datetime-local" id="f-created_before" value=${fromIso(form.created_before)} onInput=${(e) => setForm({ ...form, created_before: toIso(e.target.value) })} /></div>
      <div class="filter-buttons"><button type="submit">Filter</button> <a href="/ui/instances">Clear</a></div>
    </form>
    ${counts && (counts.error ? html`<p class="muted">Counts: ${counts.error}</p>` : html`
      <ul class="counts" aria-label="Instances per status">
        <li><a href=${'/ui/instances' + qs({ ...filter, status: '' })} aria-current=${!filter.status ? 'true' : undefined}>all <strong>${counts.total}</strong></a></li>
        ${Object.entries(counts.counts).map(([s, n]) => html`<li><a href=${'/ui/instances' + qs({ ...filter, status: s })} aria-current=${filter.status === s ? 'true' : undefined}><${Status} status=${s} /> <strong>${n}</strong></a></li>`)}
      </ul>`)}
    <${BulkBar} filter=${filter} selected=${selected} allMatching=${allMatching} nSelected=${nSelected} onDone=${() => { setSelected(new Set()); setAllMatching(false); reload(); loadCounts(); }} />
    ${allOnPage && !allMatching && matchTotal > 0 && html`<p class="select-all">All ${pageIds.length} on this page are selected. <button type="button" id="select-all-matching" onClick=${() => setAllMatching(true)}>Select all ${matchTotal} matching</button></p>`}
    ${allMatching && html`<p class="select-all" role="status">All ${matchTotal} matching instances are selected. <button type="button" onClick=${() => { setAllMatching(false); setSelected(new Set()); }}>Clear selection</button></p>`}
    <${ErrorBox} error=${list.error} />
    <table class="list">
      <caption class="sr-only">Instances, newest first</caption>
      <thead><tr>
        <th scope="col"><input type="checkbox" aria-label="Select all on this page" checked=${allOnPage} onChange=${() => { setAllMatching(false); setSelected(allOnPage ? new Set() : new Set(pageIds)); }} /></th>
        <th scope="col">Instance</th><th scope="col">Definition</th><th scope="col">Status</th><th scope="col">Business reference</th><th scope="col">Created</th><th scope="col">Updated</th>
      </tr></thead>
      <tbody>${list.items.map((i) => html`<tr>
        <td><input type="checkbox" aria-label=${'Select ' + i.id} checked=${allMatching || selected.has(i.id)} onChange=${() => toggle(i.id)} /></td>
        <td><a class="mono" href=${'/ui/instances/' + i.id}>${i.id}</a></td>
        <td><a href=${`/ui/definitions/${encodeURIComponent(i.definition.name)}/${i.definition.version}`}>${i.definition.name} v${i.definition.version}</a></td>
        <td><${Status} status=${i.status} /></td>
        <td>${i.business_ref || html`<span class="muted">—</span>`}</td>
        <td><${Time} at=${i.created_at} /></td><td><${Time} at=${i.updated_at} /></td>
      </tr>`)}</tbody>
    </table>
    ${!list.loading && list.items.length === 0 && !list.error && html`<p>No instance matches.</p>`}
    <${Pager} cursors=${list.cursors} next=${list.next} onPage=${page} />`;
}

// The bulk action bar: a batch job for "all matching", else one request per instance.
function BulkBar({ filter, selected, allMatching, nSelected, onDone }) {
  const allowed = ACTIONS.filter(([, perm]) => can(perm));
  const [action, setAction] = useState(allowed[0] ? allowed[0][0] : '');
  const [confirm, setConfirm] = useState(false);
  const [reason, setReason] = useState('');
  const [sigName, setSigName] = useState('');
  const [sigPayload, setSigPayload] = useState('{}');
  const [progress, setProgress] = useState(null);
  const [error, setError] = useState(null);
  if (allowed.length === 0) return null;
  const what = ACTIONS.find((a) => a[0] === action);
  const run = async () => {
    setError(null);
    let args;
    if (action === 'signal') {
      try { args = { name: sigName, payload: JSON.parse(sigPayload || '{}') }; } catch (e) { setError('The payload is not JSON: ' + e.message); return; }
    } else if (reason) args = { reason };
    setConfirm(false);
    if (allMatching) {
      const batchFilter = { ...filter };
      if (batchFilter.version) batchFilter.version = Number(batchFilter.version);
      const r = await api('POST', '/v1/batches', { filter: batchFilter, action, args });
      if (!r.ok) { setError('The batch was refused: ' + problemText(r)); return; }
      setProgress({ id: r.data.id, done: r.data.done || 0, failed: r.data.failed || 0, total: r.data.total, status: r.data.status });
      for (let i = 0; i < 7200; i++) {
        await new Promise((res) => setTimeout(res, 500));
        const b = await api('GET', '/v1/batches/' + r.data.id);
        if (!b.ok) { setError('Batch progress: ' + problemText(b)); break; }
        setProgress({ id: b.data.id, done: b.data.done, failed: b.data.failed, total: b.data.total, status: b.data.status, failures: b.data.failures });
        if (b.data.status !== 'running') break;
      }
    } else {
      const ids = [...selected];
      let done = 0, failed = 0;
      const failures = [];
      setProgress({ done, failed, total: ids.length, status: 'running' });
      for (const id of ids) {
        let body = { ...(args || {}) };
        let path = `/v1/instances/${id}/${action}`;
        if (action === 'signal') { path = `/v1/instances/${id}/signals`; body = args; }
        if (['retry', 'pause', 'resume'].includes(action)) {
          const g = await api('GET', '/v1/instances/' + id);
          if (g.ok) body.expected_version = g.data.state_version;
        }
        const r = await api('POST', path, body);
        if (r.ok) done++; else { failed++; failures.push({ instance_id: id, error: problemText(r) }); }
        setProgress({ done, failed, total: ids.length, status: 'running', failures });
      }
      setProgress({ done, failed, total: ids.length, status: 'completed', failures });
    }
    onDone();
  };
  const pct = progress && progress.total ? Math.round(((progress.done + progress.failed) / progress.total) * 100) : 0;
  return html`<section class="bulk" aria-label="Bulk action">
    <label for="bulk-action">Bulk action</label>
    <select id="bulk-action" value=${action} onChange=${(e) => setAction(e.target.value)}>${allowed.map(([a]) => html`<option value=${a}>${a}</option>`)}</select>
    <button type="button" id="bulk-run" disabled=${!nSelected} onClick=${() => setConfirm(true)}>Apply to ${nSelected || 0} selected</button>
    <${ErrorBox} error=${error} />
    ${progress && html`<div class="progress" role="status">
      <label for="bulk-progress">${progress.id ? `Batch ${progress.id}` : 'Bulk action'}: <span id="bulk-done">${progress.done}</span> of ${progress.total} done${progress.failed ? `, ${progress.failed} failed` : ''} (${progress.status})</label>
      <progress id="bulk-progress" max=${progress.total || 1} value=${progress.done + progress.failed}>${pct}%</progress>
      ${progress.failures && progress.failures.length > 0 && html`<details><summary>Failures</summary><ul>${progress.failures.map((f) => html`<li><a href=${'/ui/instances/' + f.instance_id}>${f.instance_id}</a>: ${typeof f.error === 'string' ? f.error : JSON.stringify(f.error)}</li>`)}</ul></details>`}
    </div>`}
    ${confirm && html`<${Confirm} title=${`${action} ${nSelected} instance${nSelected === 1 ? '' : 's'}?`}
        text=${`This ${what[2]}${allMatching ? ', for every instance matching the filter now, as one durable batch job' : ''}. It cannot be undone.`}
        confirmLabel=${`${action} ${nSelected}`} onConfirm=${run} onClose=${() => setConfirm(false)}>
      ${action === 'signal' ? html`
        <label for="bulk-signal">Signal name</label><input id="bulk-signal" required value=${sigName} onInput=${(e) => setSigName(e.target.value)} />
        <label for="bulk-payload">Payload (JSON)</label><textarea id="bulk-payload" rows="4" value=${sigPayload} onInput=${(e) => setSigPayload(e.target.value)}></textarea>`
      : html`<label for="bulk-reason">Reason (recorded in the audit log)</label><input id="bulk-reason" value=${reason} onInput=${(e) => setReason(e.target.value)} />`}
    <//>`}
  </section>`;
}
