// The console's only way to the server: the token'd /v1 API (docs/api.md).  The token lives in
// sessionStorage (gone when the tab closes) and travels only in the Authorization header, never
// in a URL, so no proxy or access log ever sees it.
const KEY = 'h3pipe.token';

export const token = {
  get: () => sessionStorage.getItem(KEY) || '',
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// fetch with the token; JSON in and out.  A 401 sends the user back to the login page.
export async function api(path, { method = 'GET', body, headers = {}, raw = false, signal } = {}) {
  const h = { Authorization: `Bearer ${token.get()}`, ...headers };
  let b = body;
  if (body !== undefined && !(body instanceof FormData) && typeof body !== 'string') {
    h['Content-Type'] = 'application/json';
    b = JSON.stringify(body);
  }
  const res = await fetch(`/v1${path}`, { method, headers: h, body: b, signal });
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`;
    let code = '';
    try {
      const j = await res.json();
      if (j.error) {
        msg = j.error.message || msg;
        code = j.error.code || '';
      }
    } catch {
      // not JSON: the status line says it
    }
    if (res.status === 401) window.dispatchEvent(new CustomEvent('h3pipe:unauthorized'));
    throw new ApiError(res.status, msg, code);
  }
  if (raw) return res;
  return res.json();
}

// An endpoint another part of #37 may not serve yet: null on 404 "no such endpoint".
export async function maybe(path, opts) {
  try {
    return await api(path, opts);
  } catch (e) {
    if (e.status === 404 && (e.code === 'not_found' || e.code === '') && /endpoint/.test(e.message))
      return null;
    throw e;
  }
}

// A blob: URL of an authenticated download (the MP4 in <video>, a preview image).
export async function blobUrl(path) {
  const res = await api(path, { raw: true });
  return URL.createObjectURL(await res.blob());
}

// Server-Sent Events over fetch, so the token goes in the Authorization header (EventSource
// cannot send one).  Reconnects after a drop with Last-Event-ID, so nothing is missed.
// onEvent({id, type, data}); onState('live' | 'reconnecting' | 'unavailable').  Returns stop().
export function subscribe(path, onEvent, onState = () => {}) {
  const ctl = new AbortController();
  let last = '';
  let stopped = false;
  (async () => {
    let delay = 500;
    while (!stopped) {
      try {
        const headers = { Authorization: `Bearer ${token.get()}`, Accept: 'text/event-stream' };
        if (last) headers['Last-Event-ID'] = last;
        const res = await fetch(`/v1${path}`, { headers, signal: ctl.signal });
        if (res.status === 404 || res.status === 401 || res.status === 403) {
          onState('unavailable');
          return;
        }
        if (!res.ok || !res.body) throw new Error(`${res.status}`);
        onState('live');
        delay = 500;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let at;
          while ((at = buf.search(/\r?\n\r?\n/)) >= 0) {
            const block = buf.slice(0, at);
            buf = buf.slice(at + (buf[at] === '\r' ? 4 : 2));
            const ev = parseBlock(block);
            if (!ev) continue;
            if (ev.id) last = ev.id;
            onEvent(ev);
          }
        }
      } catch (e) {
        if (stopped || e.name === 'AbortError') return;
      }
      if (stopped) return;
      onState('reconnecting');
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  })();
  return () => {
    stopped = true;
    ctl.abort();
  };
}

function parseBlock(block) {
  let id = '';
  let type = 'message';
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(':')) continue;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    const value = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
    if (field === 'id') id = value;
    else if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length && type === 'message') return null;
  let d = {};
  try {
    d = JSON.parse(data.join('\n'));
  } catch {
    d = { text: data.join('\n') };
  }
  if (typeof d !== 'object' || d === null) d = { value: d };
  return { id, type: d.type || type, data: d };
}
