// The API client: same-origin calls to /v1 with the bearer token the user entered at
// sign-in (kept in sessionStorage, so for this tab only). Never throws: every call
// answers {ok, status, data} where data is the JSON body or the problem document.
const KEY = 'strand.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

export async function api(method, path, body, opts = {}) {
  const headers = { Accept: 'application/json' };
  const t = token.get();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
    });
  } catch (e) {
    return { ok: false, status: 0, data: { code: 'unreachable', message: String(e) } };
  }
  const text = await res.text();
  let data = text;
  if (!opts.text) {
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { code: 'bad_answer', message: text.slice(0, 200) };
    }
  }
  if (!res.ok && typeof data !== 'object') data = { code: 'http_' + res.status, message: String(data).slice(0, 200) };
  if (res.status === 401 && onUnauthorized) onUnauthorized();
  return { ok: res.ok, status: res.status, data };
}

let onUnauthorized = null;
export function setOnUnauthorized(fn) {
  onUnauthorized = fn;
}

// A query string from an object, leaving out empty values.
export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, v);
  const s = u.toString();
  return s ? '?' + s : '';
}

// A problem document as one line of text.
export function problemText(r) {
  const d = r.data || {};
  const what = d.detail || d.message || d.title || '';
  return `${r.status || 'network'} ${d.code || ''}${what ? ': ' + what : ''}`;
}
