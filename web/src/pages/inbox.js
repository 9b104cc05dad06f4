// Inbox: the signed-in principal's open tasks (every role it holds) and those assigned
// to it, oldest first; assign, release, and complete through a form generated from the
// task's result_schema, with the server's validation errors shown at the field.
import { useEffect, useState } from 'preact/hooks';
import { api, qs, problemText } from '../api.js';
import { html, ErrorBox, Time, JsonTree, getMe, can, navigate } from '../ui.js';

async function loadTasks() {
  const me = getMe();
  const all = (me.permissions || []).includes('admin');
  const queries = all
    ? [{ status: 'open' }, { status: 'assigned' }]
    : [...(me.roles || []).map((role) => ({ status: 'open', role })), { status: 'assigned', assignee: me.principal }];
  const seen = new Map();
  for (const q of queries) {
    let cursor = null;
    for (let page = 0; page < 20; page++) {
      const r = await api('GET', '/v1/tasks' + qs({ ...q, limit: 500, cursor }));
      if (!r.ok) return { error: problemText(r) };
      r.data.items.forEach((t) => seen.set(t.id, t));
      cursor = r.data.next_cursor;
      if (!cursor) break;
    }
  }
  return { items: [...seen.values()].sort((a, b) => String(a.created_at).localeCompare(String(b.created_at))) };
}

export function Inbox({ taskId }) {
  const [tasks, setTasks] = useState(null);
  const reload = () => loadTasks().then(setTasks);
  useEffect(() => { reload(); }, [taskId]);
  const me = getMe();
  const open = tasks && tasks.items ? tasks.items.filter((t) => t.status === 'open').length : 0;
  const mine = tasks && tasks.items ? tasks.items.filter((t) => t.assignee === me.principal).length : 0;
  return html`<h1>Inbox</h1>
    ${!can('tasks:read') && html`<p>Your principal holds no role with tasks.</p>`}
    ${tasks && tasks.error && html`<${ErrorBox} error=${tasks.error} />`}
    ${tasks && tasks.items && html`<p id="inbox-counts">${open} open, ${mine} assigned to you.</p>
      <div class="two">
        <table class="list">
          <caption class="sr-only">Tasks, oldest first</caption>
          <thead><tr><th scope="col">Task</th><th scope="col">Status</th><th scope="col">Roles</th><th scope="col">Created</th><th scope="col">Deadline</th></tr></thead>
          <tbody>${tasks.items.map((t) => html`<tr class=${t.id === taskId ? 'selected' : ''}>
            <td><a href=${'/ui/inbox/' + t.id} aria-current=${t.id === taskId ? 'true' : undefined}>${t.name}</a></td>
            <td>${t.status}${t.assignee ? ` (${t.assignee})` : ''}</td><td>${t.roles.join(', ')}</td>
            <td><${Time} at=${t.created_at} /></td><td><${Time} at=${t.deadline_at} /></td></tr>`)}</tbody>
        </table>
        ${taskId && html`<${Task} id=${taskId} key=${taskId} onChanged=${reload} />`}
      </div>
      ${tasks.items.length === 0 && html`<p>Nothing to do.</p>`}`}`;
}

// One input per property of an object schema; anything else is one JSON field.
function fieldsOf(schema) {
  if (!schema || schema.type !== 'object' || !schema.properties) return null;
  return Object.entries(schema.properties).map(([name, s]) => ({ name, s: s || {}, required: (schema.required || []).includes(name) }));
}

function Task({ id, onChanged }) {
  const [task, setTask] = useState(null);
  const [values, setValues] = useState({});
  const [errors, setErrors] = useState({});
  const [error, setError] = useState(null);
  const [done, setDone] = useState(null);
  const load = async () => {
    const r = await api('GET', '/v1/tasks/' + id);
    if (!r.ok) { setError(problemText(r)); return; }
    setTask(r.data);
  };
  useEffect(() => { load(); }, [id]);
  if (error && !task) return html`<section><${ErrorBox} error=${error} /></section>`;
  if (!task) return html`<section aria-busy="true">Loading…</section>`;
  const me = getMe();
  const fields = fieldsOf(task.result_schema);
  const act = async (verb, body) => {
    setError(null); setErrors({});
    const r = await api('POST', `/v1/tasks/${id}/${verb}`, body);
    if (r.ok) { setDone(`${verb}: done.`); await load(); onChanged(); return true; }
    const f = r.data && r.data.field;
    if (r.status === 422 && f) {
      const m = f.match(/^\/result\/([^/]+)/);
      if (m && fields) { setErrors({ [m[1]]: r.data.detail || r.data.message }); setError('The server refused the result: see the field marked below.'); return false; }
    }
    setError(problemText(r));
    return false;
  };
  const submit = (e) => {
    e.preventDefault();
    let result;
    if (fields) {
      result = {};
      for (const { name, s } of fields) {
        const v = values[name];
        if (v === undefined || v === '') { if (s.type === 'boolean') result[name] = false; continue; }
        if (s.type === 'integer' || s.type === 'number') result[name] = Number(v);
        else if (s.type === 'object' || s.type === 'array') { try { result[name] = JSON.parse(v); } catch { result[name] = v; } }
        else result[name] = v;
      }
    } else {
      try { result = JSON.parse(values.__json || '{}'); } catch (err) { setError('The result is not JSON: ' + err.message); return; }
    }
    act('complete', { result });
  };
  const set = (name, v) => setValues({ ...values, [name]: v });
  const input = ({ name, s, required }) => {
    const idf = 'r-' + name;
    const err = errors[name];
    const common = { id: idf, name, 'aria-invalid': err ? 'true' : undefined, 'aria-describedby': err ? idf + '-err' : undefined };
    let control;
    if (s.type === 'boolean') control = html`<input type="checkbox" ...${common} checked=${!!values[name]} onChange=${(e) => set(name, e.target.checked)} />`;
    else if (Array.isArray(s.enum)) control = html`<select ...${common} value=${values[name] ?? ''} onChange=${(e) => set(name, e.target.value)}><option value="">choose…</option>${s.enum.map((o) => html`<option value=${o}>${String(o)}</option>`)}</select>`;
    else if (s.type === 'integer' || s.type === 'number') control = html`<input type="number" step=${s.type === 'integer' ? 1 : 'any'} ...${common} value=${values[name] ?? ''} onInput=${(e) => set(name, e.target.value)} />`;
    else if (s.type === 'object' || s.type === 'array') control = html`<textarea rows="3" ...${common} value=${values[name] ?? ''} onInput=${(e) => set(name, e.target.value)}></textarea>`;
    else control = html`<input type="text" ...${common} value=${values[name] ?? ''} onInput=${(e) => set(name, e.target.value)} />`;
    return html`<div class=${'field' + (err ? ' invalid' : '')}>
      <label for=${idf}>${s.title || name}${required ? ' (required)' : ''}</label>${control}
      ${s.description && html`<span class="muted">${s.description}</span>`}
      ${err && html`<span class="field-error" id=${idf + '-err'} role="alert">${err}</span>`}
    </div>`;
  };
  const actionable = task.status === 'open' || task.status === 'assigned';
  return html`<section aria-labelledby="task-h" class="task">
    <h2 id="task-h">${task.name}</h2>
    <dl class="kv">
      <dt>Status</dt><dd id="task-status">${task.status}${task.assignee ? ` (assigned to ${task.assignee})` : ''}</dd>
      <dt>Instance</dt><dd><a href=${'/ui/instances/' + task.instance_id}>${task.instance_id}</a></dd>
      <dt>Roles</dt><dd>${task.roles.join(', ')}</dd>
      <dt>Created</dt><dd><${Time} at=${task.created_at} /></dd>
    </dl>
    <h3>Payload</h3><${JsonTree} value=${task.payload} />
    ${done && html`<p role="status" class="flash">${done}</p>`}
    ${actionable && can('tasks:act') && html`<div class="actions">
      ${task.status === 'open' && html`<button type="button" onClick=${() => act('assign', {})}>Assign to me</button>`}
      ${task.status === 'assigned' && html`<button type="button" onClick=${() => act('release', {})}>Release</button>`}
    </div>
    <form class="result" onSubmit=${submit} noValidate aria-labelledby="result-h">
      <h3 id="result-h">Complete</h3>
      ${fields ? fields.map(input) : html`<div class="field"><label for="r-json">Result (JSON object)</label><textarea id="r-json" rows="5" value=${values.__json ?? '{}'} onInput=${(e) => set('__json', e.target.value)}></textarea></div>`}
      <${ErrorBox} error=${error} />
      <button type="submit" id="complete">Complete task</button>
    </form>`}
    ${!actionable && error && html`<${ErrorBox} error=${error} />`}
  </section>`;
}
