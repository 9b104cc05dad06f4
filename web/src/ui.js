// Shared pieces of the console: html templates, the router, permissions, and small
// components (error box, JSON tree, confirmation dialog, pager, time).
import { h } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import htm from 'htm';

export const html = htm.bind(h);

// ---- router: real paths under /ui/, so every page and instance is a shareable URL ----
const listeners = new Set();
export function navigate(url, replace = false) {
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  listeners.forEach((fn) => fn());
  window.scrollTo(0, 0);
}
window.addEventListener('popstate', () => listeners.forEach((fn) => fn()));
export function useLocation() {
  const [, set] = useState(0);
  useEffect(() => {
    const fn = () => set((n) => n + 1);
    listeners.add(fn);
    return () => listeners.delete(fn);
  }, []);
  return { path: location.pathname, query: new URLSearchParams(location.search) };
}
// Same-origin links under /ui/ are routed here, without reloading the page.
document.addEventListener('click', (e) => {
  const a = e.target.closest && e.target.closest('a');
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey) return;
  const href = a.getAttribute('href');
  if (!href || !href.startsWith('/ui/') || a.target) return;
  e.preventDefault();
  navigate(href);
});

// ---- what the signed-in principal may do (GET /v1/whoami); the server decides anyway ----
let me = null;
export function setMe(who) {
  me = who;
}
export function getMe() {
  return me;
}
export function can(perm) {
  if (!me) return false;
  const all = me.permissions || [];
  if (all.includes('admin') || all.includes(perm)) return true;
  return (me.limited || []).some((g) => g.startsWith(perm + '@') || g.startsWith(perm + ':'));
}

// ---- components ----
export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<div class="error" role="alert">${error}</div>`;
}

export function Time({ at }) {
  if (!at) return html`<span class="muted">—</span>`;
  const d = new Date(at);
  return html`<time datetime=${at} title=${at}>${d.toLocaleString()}</time>`;
}

export function Status({ status }) {
  return html`<span class=${'status s-' + status}>${status}</span>`;
}

export function JsonTree({ value, name, open = true }) {
  if (value === null || typeof value !== 'object') {
    return html`<div class="jt-leaf">${name !== undefined ? html`<span class="jt-key">${name}: </span>` : ''}<span class=${'jt-' + (value === null ? 'null' : typeof value)}>${JSON.stringify(value)}</span></div>`;
  }
  const entries = Array.isArray(value) ? value.map((v, i) => [i, v]) : Object.entries(value);
  const label = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
  return html`<details class="jt" open=${open}>
    <summary>${name !== undefined ? html`<span class="jt-key">${name}</span> ` : ''}<span class="muted">${label}</span></summary>
    <div class="jt-body">${entries.map(([k, v]) => html`<${JsonTree} key=${k} name=${k} value=${v} open=${false} />`)}</div>
  </details>`;
}

// A modal confirmation that says what will happen; `children` is the form body.
export function Confirm({ title, text, confirmLabel = 'Confirm', onConfirm, onClose, children, error, busy }) {
  const ref = useRef();
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d && d.open && d.close();
  }, []);
  return html`<dialog ref=${ref} aria-labelledby="confirm-title" onClose=${onClose} onCancel=${onClose}>
    <form method="dialog" onSubmit=${(e) => { e.preventDefault(); onConfirm(); }}>
      <h2 id="confirm-title">${title}</h2>
      <p class="confirm-text">${text}</p>
      ${children}
      <${ErrorBox} error=${error} />
      <div class="buttons">
        <button type="button" onClick=${onClose}>Cancel</button>
        <button type="submit" class="danger" disabled=${busy}>${confirmLabel}</button>
      </div>
    </form>
  </dialog>`;
}

// Cursor pagination: "Newer" goes back through the cursors seen, "Older" follows next_cursor.
export function Pager({ cursors, next, onPage }) {
  return html`<nav class="pager" aria-label="Pages">
    <button type="button" disabled=${cursors.length === 0} onClick=${() => onPage(-1)}>Previous page</button>
    <span class="muted">page ${cursors.length + 1}</span>
    <button type="button" disabled=${!next} onClick=${() => onPage(1)}>Next page</button>
  </nav>`;
}

// A cursor-paginated list: load(cursor) answers {ok, items, next, error}. Returns
// [state, page(+1|-1), reload()]; the stack of cursors seen lets "previous" go back.
export function usePaged(load, deps) {
  const [state, setState] = useState({ items: [], next: null, cursor: null, cursors: [], error: null, loading: true });
  const run = async (cursor, cursors) => {
    setState((s) => ({ ...s, loading: true }));
    const r = await load(cursor);
    setState({ items: r.ok ? r.items : [], next: r.ok ? r.next : null, cursor, cursors, error: r.ok ? null : r.error, loading: false });
  };
  useEffect(() => {
    run(null, []);
  }, deps);
  const page = (dir) => {
    if (dir > 0) run(state.next, [...state.cursors, state.cursor]);
    else run(state.cursors[state.cursors.length - 1] ?? null, state.cursors.slice(0, -1));
  };
  return [state, page, () => run(state.cursor, state.cursors)];
}
