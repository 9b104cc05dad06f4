// The Strand console's entry: sign-in, the layout and the page routes (docs/console.md).
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import './style.css';
import { api, token, setOnUnauthorized, problemText } from './api.js';
import { html, useLocation, navigate, setMe, getMe, ErrorBox } from './ui.js';
import { Overview } from './pages/overview.js';
import { Instances } from './pages/instances.js';
import { Instance } from './pages/instance.js';
import { Inbox } from './pages/inbox.js';
import { DeadLetters, DeadLetter } from './pages/deadletters.js';
import { Definitions, Definition } from './pages/definitions.js';

const NAV = [
  ['/ui/', 'Overview'],
  ['/ui/instances', 'Instances'],
  ['/ui/inbox', 'Inbox'],
  ['/ui/dead-letters', 'Dead letters'],
  ['/ui/definitions', 'Definitions'],
];

function route(path) {
  const p = path.replace(/\/+$/, '').split('/').slice(2).map(decodeURIComponent);
  switch (p[0] || '') {
    case '': return ['Overview', html`<${Overview} />`];
    case 'instances': return p[1] ? ['Instance', html`<${Instance} id=${p[1]} key=${p[1]} />`] : ['Instances', html`<${Instances} />`];
    case 'inbox': return ['Inbox', html`<${Inbox} taskId=${p[1]} />`];
    case 'dead-letters': return p[1] ? ['Dead letter', html`<${DeadLetter} id=${p[1]} key=${p[1]} />`] : ['Dead letters', html`<${DeadLetters} />`];
    case 'definitions': return p[1] ? ['Definition', html`<${Definition} name=${p[1]} version=${p[2]} key=${p[1] + '/' + p[2]} />`] : ['Definitions', html`<${Definitions} />`];
    default: return ['Not found', html`<h1>Not found</h1><p>No console page at ${path}.</p>`];
  }
}

function SignIn({ onSignedIn, error: initial }) {
  const [value, setValue] = useState('');
  const [error, setError] = useState(initial);
  const submit = async (e) => {
    e.preventDefault();
    token.set(value.trim());
    const r = await api('GET', '/v1/whoami');
    if (r.ok) onSignedIn(r.data);
    else {
      token.clear();
      setError(r.status === 401 ? 'This token is not known to the server.' : problemText(r));
    }
  };
  return html`<main id="main" class="signin">
    <h1>Sign in to Strand</h1>
    <form onSubmit=${submit}>
      <label for="token">Bearer token</label>
      <input id="token" name="token" type="password" autocomplete="current-password" required value=${value} onInput=${(e) => setValue(e.target.value)} />
      <p class="muted">Kept for this browser tab only (session storage), sent with every API call.</p>
      <${ErrorBox} error=${error} />
      <button type="submit">Sign in</button>
    </form>
  </main>`;
}

function App() {
  const loc = useLocation();
  const [me, setMeState] = useState(undefined);
  const [error, setError] = useState(null);
  const signedIn = (who) => {
    setMe(who);
    setMeState(who);
  };
  useEffect(() => {
    setOnUnauthorized(() => {
      if (getMe() && getMe().authentication) {
        token.clear();
        setMe(null);
        setMeState(null);
        setError('Your token was refused: sign in again.');
      }
    });
    api('GET', '/v1/whoami').then((r) => {
      if (r.ok) signedIn(r.data);   // a kept token, or authentication off (dev)
      else if (r.status === 401) setMeState(null);
      else { setError(problemText(r)); setMeState(null); }
    });
  }, []);
  const [title, page] = route(loc.path);
  useEffect(() => {
    document.title = `${title} · Strand`;
  }, [title, loc.path]);
  if (me === undefined) return html`<main id="main"><p aria-busy="true">Loading…</p></main>`;
  if (me === null) return html`<${SignIn} onSignedIn=${signedIn} error=${error} />`;
  const signOut = () => {
    token.clear();
    setMe(null);
    setMeState(null);
    navigate('/ui/');
  };
  const current = (href) => (href === '/ui/' ? loc.path === '/ui/' || loc.path === '/ui' : loc.path.startsWith(href));
  return html`
    <a class="skip" href="#main">Skip to content</a>
    <header>
      <span class="brand">Strand</span>
      <nav aria-label="Main">
        <ul>${NAV.map(([href, label]) => html`<li><a href=${href} aria-current=${current(href) ? 'page' : undefined}>${label}</a></li>`)}</ul>
      </nav>
      <span class="who">
        <span id="principal" title=${(me.permissions || []).join(', ')}>${me.principal}</span>
        ${me.authentication ? html`<button type="button" onClick=${signOut}>Sign out</button>` : html`<span class="muted">(authentication off)</span>`}
      </span>
    </header>
    <main id="main" tabindex="-1">${page}</main>`;
}

render(html`<${App} />`, document.getElementById('app'));
