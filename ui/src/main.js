// The console (#38, docs/console.md): one page per URL under /ui/, every figure from the token'd
// /v1 API of h3pipe-api.  Pages: / (runs), /runs/RUN, /jobs/ID, /fleet, /login.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, token } from './api.js';
import { html, Link, navigate, useRoute } from './ui.js';
import { Login } from './login.js';
import { Runs } from './runs.js';
import { Run } from './run.js';
import { Job } from './job.js';
import { Fleet } from './fleet.js';

function App() {
  const route = useRoute();
  // With a token the page starts at once (its own requests beside GET /v1/me); until /me answers
  // the role is unknown and no action is shown.  Without one, or once it is refused: the login.
  const [me, setMe] = useState(token.get() ? { name: '…', role: '' } : null);

  const signIn = async () => {
    if (!token.get()) return setMe(null);
    try {
      setMe(await api('/me'));
    } catch {
      token.clear();
      setMe(null);
    }
  };
  useEffect(() => {
    signIn();
    const out = () => {
      token.clear();
      setMe(null);
    };
    window.addEventListener('h3pipe:unauthorized', out);
    return () => window.removeEventListener('h3pipe:unauthorized', out);
  }, []);

  if (!me)
    return html`<${Login}
      onDone=${async () => {
        await signIn();
        if (route.path === '/login') navigate('/', true);
      }}
    />`;

  const p = route.path;
  let page;
  let m;
  if ((m = p.match(/^\/runs\/([^/]+)\/?$/))) page = html`<${Run} id=${decodeURIComponent(m[1])} me=${me} />`;
  else if ((m = p.match(/^\/jobs\/([^/]+)\/?$/))) page = html`<${Job} id=${decodeURIComponent(m[1])} me=${me} />`;
  else if (p === '/fleet' || p === '/fleet/') page = html`<${Fleet} me=${me} />`;
  else page = html`<${Runs} me=${me} query=${route.query} />`;
  const here = (x) => (x === '/fleet' ? p.startsWith('/fleet') : !p.startsWith('/fleet'));
  return html`
    <a class="skip" href="#main">Skip to content</a>
    <header class="top">
      <strong class="brand">h3pipe</strong>
      <nav aria-label="Main">
        <${Link} to="/" aria-current=${here('/') ? 'page' : undefined}>Runs<//>
        <${Link} to="/fleet" aria-current=${here('/fleet') ? 'page' : undefined}>Fleet<//>
      </nav>
      <span class="who" data-testid="who">${me.name} (${me.role})</span>
      <button class="link" onClick=${() => {
        token.clear();
        setMe(null);
      }}>Sign out</button>
    </header>
    <main id="main" tabindex="-1">${page}</main>`;
}

render(html`<${App} />`, document.getElementById('app'));
