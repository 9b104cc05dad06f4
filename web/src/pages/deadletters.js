// Dead letters: a filterable list, and one letter decoded (envelope fields and JSON),
// with edit-then-replay (PUT .../payload, then POST .../replay) and discard.
import { useEffect, useState } from 'preact/hooks';
import { api, qs, problemText } from '../api.js';
import { html, ErrorBox, Time, JsonTree, Pager, usePaged, navigate, useLocation, can, Confirm } from '../ui.js';
import { base64Bytes, decodeMessage } from '../protobuf.js';

export function DeadLetters() {
  const loc = useLocation();
  const status = loc.query.get('status') ?? 'open';
  const reason = loc.query.get('reason') || '';
  const instance = loc.query.get('instance_id') || '';
  const [form, setForm] = useState({ status, reason, instance_id: instance });
  const key = status + '|' + reason + '|' + instance;
  const [list, page] = usePaged(async (cursor) => {
    const r = await api('GET', '/v1/dead-letters' + qs({ status, reason, instance_id: instance, limit: 100, cursor }));
    if (!r.ok) return { ok: false, error: problemText(r) };
    // filtered here too, for an API that does not filter by reason or instance
    const items = r.data.items.filter((d) => (!reason || d.reason.includes(reason)) && (!instance || d.instance_id === instance));
    return { ok: true, items, next: r.data.next_cursor };
  }, [key]);
  const apply = (e) => { e.preventDefault(); navigate('/ui/dead-letters' + qs(form)); };
  return html`<h1>Dead letters</h1>
    <form class="filters" onSubmit=${apply} aria-label="Filter dead letters">
      <div><label for="d-status">Status</label><select id="d-status" value=${form.status} onChange=${(e) => setForm({ ...form, status: e.target.value })}>
        ${['open', 'replayed', 'discarded'].map((s) => html`<option value=${s}>${s}</option>`)}</select></div>
      <div><label for="d-reason">Reason contains</label><input id="d-reason" value=${form.reason} onInput=${(e) => setForm({ ...form, reason: e.target.value })} /></div>
      <div><label for="d-instance">Instance id</label><input id="d-instance" class="mono" value=${form.instance_id} onInput=${(e) => setForm({ ...form, instance_id: e.target.value })} /></div>
      <div class="filter-buttons"><button type="submit">Filter</button></div>
    </form>
    <${ErrorBox} error=${list.error} />
    <table class="list">
      <caption class="sr-only">Dead letters, newest first</caption>
      <thead><tr><th scope="col">Id</th><th scope="col">Reason</th><th scope="col">Topic</th><th scope="col">Instance</th><th scope="col">Attempts</th><th scope="col">Created</th></tr></thead>
      <tbody>${list.items.map((d) => html`<tr>
        <td><a href=${'/ui/dead-letters/' + d.id}>${d.id}</a></td><td>${d.reason}</td><td>${d.source_topic}</td>
        <td>${d.instance_id ? html`<a class="mono" href=${'/ui/instances/' + d.instance_id}>${d.instance_id}</a>` : '—'}</td>
        <td>${d.attempts}</td><td><${Time} at=${d.created_at} /></td></tr>`)}</tbody>
    </table>
    ${!list.loading && list.items.length === 0 && !list.error && html`<p>No dead letter here.</p>`}
    <${Pager} cursors=${list.cursors} next=${list.next} onPage=${page} />`;
}

export function DeadLetter({ id }) {
  const [dl, setDl] = useState(null);
  const [error, setError] = useState(null);
  const [edit, setEdit] = useState(null);
  const [confirm, setConfirm] = useState(null);
  const [flash, setFlash] = useState(null);
  const [busy, setBusy] = useState(false);
  const load = async () => {
    const r = await api('GET', '/v1/dead-letters/' + id);
    if (!r.ok) { setError(problemText(r)); return; }
    setDl({ ...r.data, decoded: decodeMessage(base64Bytes(r.data.payload_base64), r.data.source_topic) });
  };
  useEffect(() => { load(); }, [id]);
  if (!dl) return html`<h1>Dead letter ${id}</h1>${error ? html`<${ErrorBox} error=${error} />` : html`<p aria-busy="true">Loading…</p>`}`;
  const f = dl.decoded.fields;
  const payloadKey = dl.decoded.kind === 'ingress' ? 'args' : 'payload';
  const open = dl.status === 'open' && can('dead-letters:operate');
  const replay = async () => {
    setBusy(true); setError(null);
    if (edit !== null) {
      let payload;
      try { payload = JSON.parse(edit); } catch (e) { setBusy(false); setError('The payload is not JSON: ' + e.message); return; }
      const p = await api('PUT', `/v1/dead-letters/${id}/payload`, { payload });
      if (!p.ok) { setBusy(false); setConfirm(null); setError('Saving the edited payload failed: ' + problemText(p)); return; }
    }
    const r = await api('POST', `/v1/dead-letters/${id}/replay`, {});
    setBusy(false); setConfirm(null);
    if (r.ok) { setFlash('Replayed: the message is back on ' + dl.source_topic + '.'); setEdit(null); load(); } else setError('Replay failed: ' + problemText(r));
  };
  const discard = async () => {
    setBusy(true);
    const r = await api('POST', `/v1/dead-letters/${id}/discard`, {});
    setBusy(false); setConfirm(null);
    if (r.ok) { setFlash('Discarded.'); load(); } else setError('Discard failed: ' + problemText(r));
  };
  return html`<h1>Dead letter ${id}</h1>
    <dl class="kv">
      <dt>Status</dt><dd id="dl-status">${dl.status}</dd><dt>Reason</dt><dd>${dl.reason}</dd>
      <dt>Source</dt><dd>${dl.source_topic} partition ${dl.source_partition} offset ${dl.source_offset}</dd>
      <dt>Instance</dt><dd>${dl.instance_id ? html`<a href=${'/ui/instances/' + dl.instance_id}>${dl.instance_id}</a>` : '—'}</dd>
      <dt>Attempts</dt><dd>${dl.attempts}</dd><dt>Node</dt><dd>${dl.node_id}</dd><dt>Created</dt><dd><${Time} at=${dl.created_at} /></dd>
    </dl>
    ${flash && html`<p role="status" class="flash">${flash}</p>`}
    <${ErrorBox} error=${error} />
    <h2>Message (${dl.decoded.kind === 'ingress' ? 'ingress command' : 'signal'} envelope)</h2>
    ${dl.decoded.error && html`<p class="warn">The bytes do not decode fully: ${dl.decoded.error}.</p>`}
    <dl class="kv">${Object.entries(f).filter(([k]) => k !== payloadKey).map(([k, v]) => html`<dt>${k}</dt><dd>${String(v)}</dd>`)}</dl>
    <h3>${payloadKey}</h3>
    ${edit === null ? html`<${JsonTree} value=${f[payloadKey] ?? null} />`
      : html`<label for="dl-edit">Edited ${payloadKey} (JSON object)</label><textarea id="dl-edit" rows="10" value=${edit} onInput=${(e) => setEdit(e.target.value)}></textarea>`}
    ${open && html`<div class="actions">
      ${edit === null && html`<button type="button" id="dl-edit-button" onClick=${() => setEdit(JSON.stringify(f[payloadKey] ?? {}, null, 2))}>Edit ${payloadKey}</button>`}
      <button type="button" id="dl-replay" onClick=${() => setConfirm('replay')}>${edit === null ? 'Replay' : 'Save and replay'}</button>
      <button type="button" class="danger" onClick=${() => setConfirm('discard')}>Discard</button>
    </div>`}
    ${confirm === 'replay' && html`<${Confirm} title="Replay this dead letter?" confirmLabel="Replay" busy=${busy} onConfirm=${replay} onClose=${() => setConfirm(null)}
       text=${`This ${edit !== null ? 'saves the edited ' + payloadKey + ' (the original stays in the audit log), then ' : ''}puts the message back on ${dl.source_topic}, where it is processed again; the letter is marked replayed.`} />`}
    ${confirm === 'discard' && html`<${Confirm} title="Discard this dead letter?" confirmLabel="Discard" busy=${busy} onConfirm=${discard} onClose=${() => setConfirm(null)}
       text="This marks the letter discarded: the message is never processed. It cannot be undone." />`}`;
}
