// /ui/ — the runs: counts per state, progress and ETA, user, start; filters by state and user
// (kept in the URL); the submit form (prompt, size, seconds, a reference image; or JSON lines).
import { useState } from 'preact/hooks';
import { api, maybe } from './api.js';
import { html, Link, navigate, usePoll, canAct, Bar, StateBadge, ErrorLine, ago, secs } from './ui.js';

// r-YYYYMMDD-HHMMSS-xxxxxxxxxxxx -> ms since the epoch (the run's start, UTC).
export function runStartMs(id) {
  const m = /r-(\d{4})(\d{2})(\d{2})-(\d{2})(\d{2})(\d{2})/.exec(id || '');
  return m ? Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]) : 0;
}

export function runState(r) {
  if (r.finished) return r.failed ? 'failed' : r.cancelled_jobs ? 'cancelled' : 'done';
  if (r.stage) return r.stage;
  return 'running';
}

function eta(r) {
  const start = r.created_unix_ms || runStartMs(r.id);
  const ended = (r.done || 0) + (r.failed || 0) + (r.cancelled_jobs || 0);
  if (!start || !ended || r.finished || !r.total) return '';
  const per = (Date.now() - start) / 1000 / ended;
  return `ETA ${secs(per * (r.total - ended))}`;
}

export function Runs({ me, query }) {
  const [runs, setRuns] = useState(null);
  const [error, setError] = useState(null);
  const stateFilter = query.get('state') || '';
  const userFilter = query.get('user') || '';

  usePoll(async () => {
    try {
      const [list, videos] = await Promise.all([maybe('/runs?limit=100'), api('/videos?limit=100')]);
      const byRun = new Map(videos.data.map((v) => [v.run_id, v]));
      let rows;
      if (list) {
        rows = list.data.map((r) => {
          const v = byRun.get(r.id);
          return v ? { ...r, user: r.user || v.user, video: v.id, stage: v.stage, prompt: v.prompt } : r;
        });
      } else {
        // GET /v1/runs not served here: each video is a run of one job.
        rows = videos.data.map((v) => ({
          id: v.run_id, total: 1, done: v.status === 'completed' ? 1 : 0,
          failed: v.status === 'failed' ? 1 : 0, cancelled_jobs: v.status === 'cancelled' ? 1 : 0,
          finished: ['completed', 'failed', 'cancelled'].includes(v.status),
          user: v.user, video: v.id, stage: v.stage, prompt: v.prompt, created_unix_ms: v.created_at * 1000,
        }));
      }
      setRuns(rows);
      setError(null);
    } catch (e) {
      setError(e);
    }
  }, 1000);

  const setFilter = (k, v) => {
    const q = new URLSearchParams(query);
    if (v) q.set(k, v);
    else q.delete(k);
    navigate(`/${q.toString() ? `?${q}` : ''}`, true);
  };
  const shown = (runs || []).filter(
    (r) => (!stateFilter || runState(r) === stateFilter || (stateFilter === 'running' && !r.finished)) &&
      (!userFilter || (r.user || '').includes(userFilter)));
  const users = [...new Set((runs || []).map((r) => r.user).filter(Boolean))];

  return html`
    <h1>Runs</h1>
    ${canAct(me) && html`<${Submit} />`}
    <section aria-labelledby="runs-h">
      <h2 id="runs-h">All runs</h2>
      <div class="filters">
        <label>State
          <select value=${stateFilter} onChange=${(e) => setFilter('state', e.target.value)}>
            <option value="">any</option>
            ${['running', 'queued', 'encode', 'sample', 'transfer', 'decode', 'done', 'failed', 'cancelled'].map(
              (s) => html`<option value=${s}>${s}</option>`)}
          </select>
        </label>
        <label>User
          <input list="users" value=${userFilter} onInput=${(e) => setFilter('user', e.target.value)} />
          <datalist id="users">${users.map((u) => html`<option value=${u} />`)}</datalist>
        </label>
      </div>
      <${ErrorLine} error=${error} />
      ${runs === null ? html`<p>Loading…</p>` : html`
      <div class="scroll">
      <table class="runs" data-testid="runs">
        <thead><tr><th scope="col">Run</th><th scope="col">State</th><th scope="col">Progress</th>
          <th scope="col">Done / failed / cancelled / total</th><th scope="col">User</th><th scope="col">Started</th></tr></thead>
        <tbody>${shown.map((r) => {
          const ended = (r.done || 0) + (r.failed || 0) + (r.cancelled_jobs || 0);
          const pct = r.total ? (100 * ended) / r.total : 0;
          return html`<tr key=${r.id} data-run=${r.id} data-video=${r.video || ''}>
            <td><${Link} to=${`/runs/${encodeURIComponent(r.id)}`}>${r.id}<//>
              ${r.prompt && html`<div class="sub">${r.prompt}</div>`}</td>
            <td class="state"><${StateBadge} state=${runState(r)} /></td>
            <td><${Bar} value=${pct} label=${`run ${r.id} progress`} /> <span class="sub">${eta(r)}</span></td>
            <td>${r.done || 0} / ${r.failed || 0} / ${r.cancelled_jobs || 0} / ${r.total}</td>
            <td>${r.user || ''}</td>
            <td>${ago(r.created_unix_ms || runStartMs(r.id))}</td></tr>`;
        })}</tbody>
      </table></div>
      ${!shown.length && html`<p>No runs${stateFilter || userFilter ? ' match the filters' : ''}.</p>`}`}
    </section>`;
}

function Submit() {
  const [error, setError] = useState(null);
  const [note, setNote] = useState('');
  const [mode, setMode] = useState('form');
  const [models, setModels] = useState(['default']);
  usePoll(async () => {
    const m = await api('/models');
    setModels(m.data.map((x) => x.id));
  }, 600000);

  const submit = async (e) => {
    e.preventDefault();
    setError(null);
    setNote('');
    const f = new FormData(e.target);
    try {
      if (mode === 'lines') {
        const run = await api('/runs', { method: 'POST', body: f.get('lines'), headers: { 'Content-Type': 'application/x-ndjson' } });
        navigate(`/runs/${encodeURIComponent(run.id)}`);
        return;
      }
      const n = Math.max(1, Math.min(20, Number(f.get('count')) || 1));
      const body = new FormData();
      for (const k of ['prompt', 'model', 'size', 'seconds']) if (f.get(k)) body.set(k, f.get(k));
      const ref = f.get('input_reference');
      if (ref && ref.size) body.set('input_reference', ref, ref.name);
      const made = [];
      for (let i = 0; i < n; i++) made.push(await api('/videos', { method: 'POST', body }));
      setNote(`Submitted ${made.map((v) => v.id).join(', ')}`);
    } catch (err) {
      setError(err);
    }
  };
  return html`
    <section aria-labelledby="submit-h" class="card">
      <h2 id="submit-h">Submit</h2>
      <div role="radiogroup" aria-label="Submit as" class="modes">
        <label><input type="radio" name="mode" checked=${mode === 'form'} onChange=${() => setMode('form')} /> A form</label>
        <label><input type="radio" name="mode" checked=${mode === 'lines'} onChange=${() => setMode('lines')} /> JSON lines (a run)</label>
      </div>
      <form onSubmit=${submit} class="submit" data-testid="submit-form">
        ${mode === 'form' ? html`
          <label class="wide">Prompt <textarea name="prompt" required rows="2"></textarea></label>
          <label>Model <select name="model">${models.map((m) => html`<option>${m}</option>`)}</select></label>
          <label>Size (WxH) <input name="size" placeholder="256x256" pattern="\\d+x\\d+" /></label>
          <label>Seconds <input name="seconds" type="number" min="1" max="60" step="1" placeholder="2" /></label>
          <label>How many <input name="count" type="number" min="1" max="20" value="1" /></label>
          <label class="wide">Reference image <input name="input_reference" type="file" accept="image/*" /></label>`
        : html`<label class="wide">One job per line (as <code>h3pipe run</code> reads them)
          <textarea name="lines" rows="5" required placeholder='{"prompt": "a red fox in snow"}'></textarea></label>`}
        <div class="wide"><button type="submit">Submit</button></div>
      </form>
      <${ErrorLine} error=${error} />
      ${note && html`<p role="status" class="note">${note}</p>`}
    </section>`;
}
