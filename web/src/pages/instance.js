// Instance: summary, actions (with a confirmation saying what will happen), the runtime
// "why is it waiting" panel, the diagram with the instance's path, variables (JSON tree,
// patchable), parent and children, and one timeline of history, notices and task events.
import { useEffect, useState } from 'preact/hooks';
import { api, qs, problemText } from '../api.js';
import { html, ErrorBox, Time, Status, JsonTree, Confirm, can } from '../ui.js';

const ENDED = ['completed', 'failed', 'cancelled', 'terminated'];

// verb: [permission, applies to status?, what will happen, fields]
const VERBS = {
  signal: ['instances:signal', (s) => !ENDED.includes(s), 'sends the signal to the instance; it is applied if the instance waits for it, else buffered'],
  'fire-timer': ['instances:operate', (s, i) => s !== 'paused' && i.waiting && i.waiting.kind === 'timer', 'fires the timer the instance waits on now, as if its due time had come'],
  'skip-wait': ['instances:operate', (s, i) => s !== 'paused' && !!i.waiting, 'completes the current wait as if its event had come, with the payload below as its data'],
  pause: ['instances:operate', (s) => ['pending', 'running', 'waiting'].includes(s), 'pauses the instance: signals, timers, task completions and call results that arrive are kept and applied in order on resume'],
  resume: ['instances:operate', (s) => s === 'paused', 'resumes the instance and applies what arrived while it was paused, in arrival order'],
  retry: ['instances:operate', (s) => s === 'failed', 'runs the failed instance again from the step that failed (or the step named below), keeping its history'],
  rewind: ['instances:operate', () => true, 'puts the instance back to the snapshot it had at the chosen version; later history stays, marked undone; children started after that point are cancelled'],
  cancel: ['instances:operate', (s) => !ENDED.includes(s), 'ends the instance as cancelled, with its open tasks, pending calls and running children'],
  terminate: ['instances:terminate', (s) => !ENDED.includes(s), 'ends the instance as terminated at once, with its open tasks, pending calls and running children; no compensation runs'],
};

function when(e) {
  return e.at || e.created_at || e.occurred_at || '';
}

export function Instance({ id }) {
  const [inst, setInst] = useState(null);
  const [rt, setRt] = useState(null);
  const [timeline, setTimeline] = useState([]);
  const [family, setFamily] = useState(null);
  const [svg, setSvg] = useState(null);
  const [error, setError] = useState(null);
  const [notes, setNotes] = useState([]);
  const [verb, setVerb] = useState(null);
  const [flash, setFlash] = useState(null);
  const load = async () => {
    const r = await api('GET', '/v1/instances/' + id);
    if (!r.ok) { setError(problemText(r)); return; }
    setInst(r.data);
    const [runtime, hist, notices, taskEvents, fam, tasks] = await Promise.all([
      api('GET', `/v1/instances/${id}/runtime`),
      api('GET', `/v1/instances/${id}/history?limit=1000`),
      api('GET', `/v1/instances/${id}/notices`),
      api('GET', `/v1/instances/${id}/task-events`),
      api('GET', `/v1/instances/${id}/family`),
      api('GET', '/v1/tasks' + qs({ instance_id: id, limit: 100 })),
    ]);
    setRt(runtime.ok ? runtime.data : { error: problemText(runtime) });
    setFamily(fam.ok ? fam.data : null);
    const items = [];
    const missing = [];
    if (hist.ok) hist.data.items.forEach((h) => items.push({ src: 'history', at: h.at, kind: h.kind, detail: h.detail, state_version: h.state_version ?? (h.detail && h.detail.state_version), undone: h.undone }));
    else missing.push('history: ' + problemText(hist));
    if (notices.ok) (notices.data.items || []).forEach((n) => items.push({ src: 'notice', at: when(n), kind: n.code, detail: n }));
    else missing.push('notices: ' + problemText(notices));
    if (taskEvents.ok) (taskEvents.data.items || []).forEach((t) => items.push({ src: 'task', at: when(t), kind: t.kind || t.event, detail: t }));
    else if (tasks.ok) tasks.data.items.forEach((t) => items.push({ src: 'task', at: t.created_at, kind: 'task ' + t.status, detail: t }));
    if (!taskEvents.ok) missing.push('task events: ' + problemText(taskEvents));
    items.sort((a, b) => String(a.at).localeCompare(String(b.at)));
    setTimeline(items);
    setNotes(missing);
    const d = r.data.definition;
    const s = await api('GET', `/v1/definitions/${encodeURIComponent(d.name)}/${d.version}/diagram.svg?instance=${id}`, undefined, { text: true });
    setSvg(s.ok ? { svg: s.data.replace(/<\?xml[^>]*>/, '').replace(/<!DOCTYPE[^>]*>/, '') } : { error: problemText(s) });
  };
  useEffect(() => { load(); }, [id]);
  if (error) return html`<h1>Instance</h1><${ErrorBox} error=${error} />`;
  if (!inst) return html`<h1>Instance</h1><p aria-busy="true">Loading…</p>`;
  const d = inst.definition;
  const verbs = Object.entries(VERBS).filter(([, [perm, applies]]) => can(perm) && applies(inst.status, inst));
  return html`<h1>Instance <span class="mono">${id}</span></h1>
    <section aria-labelledby="summary-h" class="summary">
      <h2 id="summary-h" class="sr-only">Summary</h2>
      <dl class="kv">
        <dt>Status</dt><dd><${Status} status=${inst.status} /></dd>
        <dt>Definition</dt><dd><a href=${`/ui/definitions/${encodeURIComponent(d.name)}/${d.version}`}>${d.name} v${d.version}</a></dd>
        <dt>Business reference</dt><dd>${inst.business_ref || '—'}</dd>
        <dt>State version</dt><dd>${inst.state_version}</dd>
        <dt>Created</dt><dd><${Time} at=${inst.created_at} /></dd>
        <dt>Updated</dt><dd><${Time} at=${inst.updated_at} /></dd>
        <dt>Ended</dt><dd><${Time} at=${inst.ended_at} /></dd>
        ${family && family.parent && html`<dt>Parent</dt><dd><a href=${'/ui/instances/' + family.parent.id}>${family.parent.definition} (${family.parent.status})</a></dd>`}
        ${inst.error && html`<dt>Error</dt><dd><code>${JSON.stringify(inst.error)}</code></dd>`}
      </dl>
      ${family && family.children.length > 0 && html`<h3>Children</h3><ul>${family.children.map((c) => html`<li><a href=${'/ui/instances/' + c.id}>${c.definition} v${c.version}</a> <${Status} status=${c.status} /></li>`)}</ul>`}
    </section>
    ${verbs.length > 0 && html`<section aria-labelledby="actions-h">
      <h2 id="actions-h">Actions</h2>
      <div class="actions">${verbs.map(([v]) => html`<button type="button" class=${v === 'terminate' || v === 'cancel' ? 'danger' : ''} data-verb=${v} onClick=${() => setVerb(v)}>${v}</button>`)}</div>
    </section>`}
    ${flash && html`<p role="status" class="flash">${flash}</p>`}
    ${verb && html`<${VerbDialog} verb=${verb} inst=${inst} timeline=${timeline} onClose=${() => setVerb(null)} onDone=${(msg) => { setVerb(null); setFlash(msg); setTimeout(load, 700); }} />`}
    <div class="two">
      <section aria-labelledby="why-h">
        <h2 id="why-h">Why is it waiting</h2>
        <${Why} inst=${inst} rt=${rt} />
      </section>
      <section aria-labelledby="diagram-h">
        <h2 id="diagram-h">Diagram</h2>
        ${svg && (svg.error ? html`<${ErrorBox} error=${svg.error} />` : html`<div id="diagram" class="diagram" role="img" aria-label=${`Diagram of ${d.name} v${d.version}; the path taken is shaded and the waiting step outlined`} dangerouslySetInnerHTML=${{ __html: svg.svg }}></div>`)}
        <p class="legend"><span class="key key-visited"></span> visited <span class="key key-waiting"></span> waiting <span class="key key-failed"></span> failed</p>
      </section>
    </div>
    <section aria-labelledby="vars-h">
      <h2 id="vars-h">Variables</h2>
      ${rt && rt.snapshot ? html`<${JsonTree} value=${rt.snapshot.state || {}} />` : html`<p class="muted">No snapshot yet.</p>`}
      ${can('instances:operate') && !ENDED.includes(inst.status) && html`<button type="button" onClick=${() => setVerb('variables')}>Patch variables</button>`}
      <details><summary>Input and output</summary><h3>Input</h3><${JsonTree} value=${inst.input} /><h3>Output</h3><${JsonTree} value=${inst.output} /></details>
    </section>
    <section aria-labelledby="timeline-h">
      <h2 id="timeline-h">Timeline</h2>
      ${notes.length > 0 && html`<p class="muted">Not shown: ${notes.join('; ')}</p>`}
      <ol class="timeline">${timeline.map((e) => html`<li class=${'tl-' + e.src + (e.undone ? ' undone' : '')}>
        <span class="tl-src">${e.src}</span> <strong>${e.kind}</strong> <${Time} at=${e.at} />${e.state_version != null ? html` <span class="muted">v${e.state_version}</span>` : ''}
        <details><summary>detail</summary><${JsonTree} value=${e.detail} /></details>
      </li>`)}</ol>
    </section>`;
}

function Why({ inst, rt }) {
  if (!rt) return html`<p aria-busy="true">Loading…</p>`;
  if (rt.error) return html`<${ErrorBox} error=${rt.error} />`;
  const w = rt.waiting;
  return html`<dl class="kv why">
    <dt>Kind</dt><dd id="waiting-kind">${w ? w.kind : inst.status}</dd>
    <dt>Token</dt><dd class="mono">${w ? w.token : '—'}</dd>
    <dt>Due</dt><dd><${Time} at=${w && w.until} /></dd>
    ${rt.stuck && html`<dt>Stuck</dt><dd class="warn">${rt.stuck.reason}</dd>`}
    <dt>Open tasks</dt><dd>${(rt.open_tasks || []).length === 0 ? '—' : html`<ul>${rt.open_tasks.map((t) => html`<li><a href=${'/ui/inbox/' + t.id}>${t.name}</a> (${t.status}${t.assignee ? ', ' + t.assignee : ''}; roles ${t.roles.join(', ')})</li>`)}</ul>`}</dd>
    <dt>Calls in flight</dt><dd>${(rt.calls_in_flight || []).length === 0 ? '—' : html`<ul>${rt.calls_in_flight.map((c) => html`<li>${c.transport} ${c.status}, attempt ${c.attempt}</li>`)}</ul>`}</dd>
    <dt>ACKs</dt><dd>${(rt.pending_acks || []).length === 0 ? '—' : html`<ul>${rt.pending_acks.map((a) => html`<li>${a.consumer} ${a.stage}, due <${Time} at=${a.due_at} /></li>`)}</ul>`}</dd>
    <dt>Waits for signals</dt><dd>${(rt.waiting_for_signals || []).join(', ') || '—'}</dd>
    <dt>Timers</dt><dd>${(rt.pending_timers || []).length === 0 ? '—' : html`<ul>${rt.pending_timers.map((t) => html`<li>${t.kind} due <${Time} at=${t.due_at} /></li>`)}</ul>`}</dd>
    <dt>Buffered signals</dt><dd>${rt.buffered_signals ?? 0}</dd>
    <dt>Last error</dt><dd>${rt.last_error ? html`<code>${rt.last_error_code}</code> ${rt.last_error.message || ''}${rt.last_error.dead_letter_id ? html` (<a href=${'/ui/dead-letters/' + rt.last_error.dead_letter_id}>dead letter ${rt.last_error.dead_letter_id}</a>)` : ''}` : '—'}</dd>
  </dl>`;
}

function VerbDialog({ verb, inst, timeline, onClose, onDone }) {
  const [name, setName] = useState('');
  const [payload, setPayload] = useState(verb === 'variables' ? '{\n}' : '{}');
  const [reason, setReason] = useState('');
  const [step, setStep] = useState('');
  const versions = [...new Set(timeline.map((e) => e.state_version).filter((v) => v != null && v < inst.state_version))];
  const [toVersion, setToVersion] = useState(versions.length ? String(versions[versions.length - 1]) : '');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const text = verb === 'variables'
    ? 'merges the JSON Merge Patch (RFC 7386) below into the instance variables; null removes a key. Before and after are recorded in the audit log.'
    : VERBS[verb][2];
  const submit = async () => {
    setError(null);
    let body = { expected_version: inst.state_version };
    let path = `/v1/instances/${inst.id}/${verb}`;
    try {
      if (verb === 'signal') { path = `/v1/instances/${inst.id}/signals`; body = { name, payload: JSON.parse(payload || '{}') }; }
      if (verb === 'variables') body.patch = JSON.parse(payload);
      if (verb === 'skip-wait') body.payload = JSON.parse(payload || '{}');
    } catch (e) { setError('Not JSON: ' + e.message); return; }
    if (reason) body.reason = reason;
    if (verb === 'retry' && step) body.step = step;
    if (verb === 'rewind') body.to_version = Number(toVersion);
    setBusy(true);
    const r = await api('POST', path, body);
    setBusy(false);
    if (r.ok) onDone(`${verb}: accepted (${r.status}).`);
    else setError(problemText(r));
  };
  return html`<${Confirm} title=${`${verb === 'variables' ? 'Patch variables of' : verb} this instance?`}
      text=${`This ${text}. It applies only if the instance is still at version ${inst.state_version}.`}
      confirmLabel=${verb === 'variables' ? 'Patch' : verb} onConfirm=${submit} onClose=${onClose} error=${error} busy=${busy}>
    ${verb === 'signal' && html`<label for="v-name">Signal name</label><input id="v-name" required value=${name} onInput=${(e) => setName(e.target.value)} />`}
    ${['signal', 'variables', 'skip-wait'].includes(verb) && html`<label for="v-payload">${verb === 'variables' ? 'Merge patch (JSON)' : 'Payload (JSON)'}</label><textarea id="v-payload" rows="6" value=${payload} onInput=${(e) => setPayload(e.target.value)}></textarea>`}
    ${verb === 'retry' && html`<label for="v-step">From step (empty: the step that failed)</label><input id="v-step" value=${step} onInput=${(e) => setStep(e.target.value)} />`}
    ${verb === 'rewind' && html`<label for="v-to">Back to state version</label><select id="v-to" value=${toVersion} onChange=${(e) => setToVersion(e.target.value)}>${versions.map((v) => html`<option value=${v}>${v}</option>`)}</select>`}
    ${['cancel', 'terminate', 'pause', 'resume', 'retry', 'rewind'].includes(verb) && html`<label for="v-reason">Reason (recorded in the audit log)</label><input id="v-reason" value=${reason} onInput=${(e) => setReason(e.target.value)} />`}
  <//>`;
}
