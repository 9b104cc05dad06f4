// Definitions: names, versions and kinds; one version's diagram and source, the diff
// between two versions, and starting an instance of it.
import { useEffect, useState } from 'preact/hooks';
import { api, qs, problemText } from '../api.js';
import { html, ErrorBox, Time, Pager, usePaged, navigate, can, useLocation } from '../ui.js';
import { diffLines } from '../diff.js';

export function Definitions() {
  const loc = useLocation();
  const name = loc.query.get('name') || '';
  const [form, setForm] = useState(name);
  useEffect(() => setForm(name), [name]);
  const [list, page] = usePaged(async (cursor) => {
    const r = await api('GET', '/v1/definitions' + qs({ name_prefix: name, limit: 100, cursor }));
    return r.ok ? { ok: true, items: r.data.items, next: r.data.next_cursor } : { ok: false, error: problemText(r) };
  }, [name]);
  const apply = (e) => {
    e.preventDefault();
    navigate('/ui/definitions' + qs({ name: form.trim() }));
  };
  return html`<h1>Definitions</h1>
    <form class="filters" onSubmit=${apply} aria-label="Filter definitions">
      <div><label for="f-name">Name starts with</label><input id="f-name" name="name" value=${form} onInput=${(e) => setForm(e.target.value)} /></div>
      <div class="filter-buttons"><button type="submit">Filter</button> <a href="/ui/definitions">Clear</a></div>
    </form>
    <${ErrorBox} error=${list.error} />
    <table class="list">
      <caption class="sr-only">Definitions by name and version</caption>
      <thead><tr><th scope="col">Name</th><th scope="col">Version</th><th scope="col">Kind</th><th scope="col">Imported</th></tr></thead>
      <tbody>${list.items.map((d) => html`<tr>
        <td><a href=${`/ui/definitions/${encodeURIComponent(d.name)}/${d.version}`}>${d.name}</a></td><td>${d.version}</td><td>${d.kind}</td><td><${Time} at=${d.created_at} /></td></tr>`)}</tbody>
    </table>
    <${Pager} cursors=${list.cursors} next=${list.next} onPage=${page} />`;
}

const pretty = (s) => {
  if (typeof s !== 'string') return JSON.stringify(s, null, 2);
  try { return JSON.stringify(JSON.parse(s), null, 2); } catch { return s; }
};

export function Definition({ name, version }) {
  const [def, setDef] = useState(null);
  const [versions, setVersions] = useState([]);
  const [svg, setSvg] = useState(null);
  const [other, setOther] = useState('');
  const [diff, setDiff] = useState(null);
  const [error, setError] = useState(null);
  const path = `/v1/definitions/${encodeURIComponent(name)}` + (version ? '/' + version : '');
  useEffect(() => {
    (async () => {
      const r = await api('GET', path);
      if (!r.ok) { setError(problemText(r)); return; }
      setDef(r.data);
      const all = await api('GET', '/v1/definitions' + qs({ name_prefix: name, limit: 500 }));
      if (all.ok) setVersions(all.data.items.filter((d) => d.name === name).map((d) => d.version));
      const s = await api('GET', `/v1/definitions/${encodeURIComponent(name)}/${r.data.version}/diagram.svg`, undefined, { text: true });
      setSvg(s.ok ? { svg: s.data.replace(/<\?xml[^>]*>/, '').replace(/<!DOCTYPE[^>]*>/, '') } : { error: problemText(s) });
    })();
  }, [name, version]);
  useEffect(() => {
    if (!other || !def) { setDiff(null); return; }
    api('GET', `/v1/definitions/${encodeURIComponent(name)}/${other}`).then((r) => {
      setDiff(r.ok ? { rows: diffLines(pretty(r.data.source ?? r.data.canonical), pretty(def.source ?? def.canonical)) } : { error: problemText(r) });
    });
  }, [other, def]);
  if (error) return html`<h1>${name}</h1><${ErrorBox} error=${error} />`;
  if (!def) return html`<h1>${name}</h1><p aria-busy="true">Loading…</p>`;
  return html`<h1>${name} <span class="muted">v${def.version} · ${def.kind}</span></h1>
    <p>Versions: ${versions.map((v) => html` <a href=${`/ui/definitions/${encodeURIComponent(name)}/${v}`} aria-current=${v === def.version ? 'page' : undefined}>v${v}</a>`)}
      · <a href=${'/ui/instances' + qs({ definition: name, version: def.version })}>instances of this version</a></p>
    ${can('instances:start') && html`<${StartForm} name=${name} version=${def.version} />`}
    <div class="two">
      <section aria-labelledby="ddiag-h"><h2 id="ddiag-h">Diagram</h2>
        ${svg && (svg.error ? html`<${ErrorBox} error=${svg.error} />` : html`<div class="diagram" role="img" aria-label=${`Diagram of ${name} v${def.version}`} dangerouslySetInnerHTML=${{ __html: svg.svg }}></div>`)}
      </section>
      <section aria-labelledby="src-h"><h2 id="src-h">Source</h2><pre class="source" tabindex="0">${pretty(def.source ?? def.canonical)}</pre></section>
    </div>
    <section aria-labelledby="diff-h"><h2 id="diff-h">Compare with another version</h2>
      <label for="diff-with">Show the changes from version</label>
      <select id="diff-with" value=${other} onChange=${(e) => setOther(e.target.value)}>
        <option value="">choose…</option>${versions.filter((v) => v !== def.version).map((v) => html`<option value=${v}>v${v}</option>`)}</select>
      ${diff && (diff.error ? html`<${ErrorBox} error=${diff.error} />` : html`<pre class="diff" tabindex="0" aria-label=${`Changes from v${other} to v${def.version}`}>${diff.rows.map((r) => html`<span class=${r.op === '+' ? 'add' : r.op === '-' ? 'del' : ''}>${r.op} ${r.line}</span>`)}</pre>`)}
    </section>`;
}

function StartForm({ name, version }) {
  const [input, setInput] = useState('{}');
  const [ref, setRef] = useState('');
  const [error, setError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    let parsed;
    try { parsed = JSON.parse(input || '{}'); } catch (err) { setError('The input is not JSON: ' + err.message); return; }
    const r = await api('POST', '/v1/instances?wait_ms=5000', { definition: name, version, input: parsed, business_ref: ref || undefined });
    if (r.ok) navigate('/ui/instances/' + r.data.id);
    else setError(problemText(r));
  };
  return html`<details class="start"><summary>Start an instance</summary>
    <form onSubmit=${submit} aria-label="Start an instance">
      <label for="start-input">Input (JSON object)</label><textarea id="start-input" rows="4" value=${input} onInput=${(e) => setInput(e.target.value)}></textarea>
      <label for="start-ref">Business reference (optional)</label><input id="start-ref" value=${ref} onInput=${(e) => setRef(e.target.value)} />
      <${ErrorBox} error=${error} />
      <button type="submit" id="start-submit">Start ${name} v${version}</button>
    </form></details>`;
}
