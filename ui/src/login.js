// The login page: the API token in a password field, kept in sessionStorage for this tab only.
import { useState } from 'preact/hooks';
import { api, token } from './api.js';
import { html, ErrorLine } from './ui.js';

export function Login({ onDone }) {
  const [value, setValue] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    token.set(value.trim());
    try {
      await api('/me');
      await onDone();
    } catch (err) {
      token.clear();
      setError(err.status === 401 ? 'That token is unknown or revoked.' : err);
    }
    setBusy(false);
  };
  return html`
    <main id="main" class="login">
      <h1>h3pipe console</h1>
      <form onSubmit=${submit} aria-describedby="login-help">
        <label for="token">API token</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required
          value=${value} onInput=${(e) => setValue(e.target.value)} autofocus />
        <p id="login-help" class="help">A token from <code>h3pipe token create NAME --role
          read|submit|admin</code>. It is kept only in this tab (sessionStorage) and sent only in
          the Authorization header.</p>
        <button type="submit" disabled=${busy}>Sign in</button>
        <${ErrorLine} error=${error} />
      </form>
    </main>`;
}
