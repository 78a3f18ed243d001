// /ui/runs/RUN — the run's jobs as rows (stage, host and pool, step progress, attempts, the
// reason when failed), kept live by the run's SSE stream without a reload; cancel and resume.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, subscribe } from './api.js';
import { html, Link, usePoll, canAct, Bar, StateBadge, ErrorLine, TERMINAL } from './ui.js';

// The job's live fields from one event of the contract (#37): type, job, stage, host, pool,
// attempt, step, steps, reason, ts_ms.
export function applyEvent(job, ev) {
  const d = ev.data || {};
  const j = { ...job };
  switch (ev.type) {
    case 'video.queued':
      j.state = 'queued';
      j.error = '';
      break;
    case 'stage.started':
      j.state = d.stage || j.state;
      j.host = d.host || j.host;
      j.pool = d.pool || j.pool;
      j.attempt = d.attempt || j.attempt;
      j.step = 0;
      break;
    case 'stage.finished':
      j.host = d.host || j.host;
      j.pool = d.pool || j.pool;
      break;
    case 'step':
      j.state = 'sample';
      j.step = Number(d.step) || 0;
      j.steps = Number(d.steps) || j.steps;
      break;
    case 'preview':
      j.preview = d;
      break;
    case 'video.completed':
      j.state = 'done';
      break;
    case 'video.failed':
      j.state = 'failed';
      j.error = d.reason || j.error;
      break;
    case 'video.cancelled':
      j.state = 'cancelled';
      j.error = d.reason || j.error;
      break;
    default:
      break;
  }
  if (d.ts_ms) j.ts = Number(d.ts_ms);
  return j;
}

export const jobLink = (run, job) => (job === 'video' ? `/jobs/video_${run}` : `/jobs/${encodeURIComponent(`${run}:${job}`)}`);

const attempts = (j) => ['encode', 'sample', 'decode'].map((s) => j[`attempts:${s}`] || 0).reduce((a, b) => Math.max(a, b), 0);

// The run's measured Gantt beside the planner's for the same jobs: the SVGs `h3pipe report --svg`
// and `--plan-svg` draw, from GET /v1/runs/{id}/gantt?format=svg (fetched with the token, shown
// inline: the server escapes every text in them).  Drawn again when another job is done.
function GanttCharts({ id, done }) {
  const [charts, setCharts] = useState(null);
  useEffect(() => {
    let current = true;
    (async () => {
      const next = {};
      for (const c of ['measured', 'planned']) {
        try {
          const res = await api(`/runs/${encodeURIComponent(id)}/gantt?format=svg&chart=${c}`, { raw: true });
          next[c] = { svg: (await res.text()).replace(/^<\?xml[^>]*>\s*/, '') };
        } catch (e) {
          next[c] = { error: e.message };
        }
      }
      if (current) setCharts(next);
    })();
    return () => {
      current = false;
    };
  }, [id, done]);
  const captions = { measured: 'Measured (from the receipts)', planned: 'Planned (the same jobs on the config)' };
  return html`<section aria-labelledby="gantt-h">
    <h2 id="gantt-h">Gantt: measured and planned</h2>
    ${!charts && html`<p>Loading…</p>`}
    ${charts && html`<div class="gantts">${['measured', 'planned'].map((c) => html`
      <figure class="gantt card" data-testid=${`gantt-${c}`}>
        <figcaption>${captions[c]}</figcaption>
        ${charts[c].svg ? html`<div class="svg" role="img" aria-label=${`${c} Gantt of run ${id}`}
          dangerouslySetInnerHTML=${{ __html: charts[c].svg }} />` : html`<p class="sub">${charts[c].error}</p>`}
      </figure>`)}</div>`}
  </section>`;
}

export function Run({ id, me }) {
  const [run, setRun] = useState(null);
  const [live, setLive] = useState({});  // job id -> fields from events since the last GET
  const [sse, setSse] = useState('connecting');
  const [error, setError] = useState(null);
  const [filter, setFilter] = useState('');
  const [all, setAll] = useState(false);
  const [loaded, setLoaded] = useState('');  // the run id whose first GET answered

  const load = async () => {
    try {
      setRun(await api(`/runs/${encodeURIComponent(id)}`));
      setLoaded(id);
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  // The run's counts and every job's state: polled slowly while the events stream is live, each
  // second when it is not (an API without /events still shows the run moving).
  usePoll(load, sse === 'live' ? 5000 : 1000, [id, sse === 'live']);
  useEffect(() => {
    // After the first GET: the stream's replay of a big run does not delay the rows.
    if (loaded !== id) return undefined;
    setLive({});
    // A run's stream replays from its start (thousands of events for a big run): applied in
    // batches, one render per 200 ms, not one per event.
    let batch = [];
    let timer = 0;
    const flush = () => {
      const evs = batch;
      batch = [];
      timer = 0;
      setLive((m) => {
        const next = { ...m };
        for (const ev of evs) next[ev.data.job] = applyEvent(next[ev.data.job] || {}, ev);
        return next;
      });
    };
    const stop = subscribe(`/runs/${encodeURIComponent(id)}/events`, (ev) => {
      if (!ev.data || !ev.data.job) return;
      batch.push(ev);
      if (!timer) timer = setTimeout(flush, 200);
    }, setSse);
    return () => {
      stop();
      clearTimeout(timer);
    };
  }, [id, loaded]);

  const jobs = useMemo(() => {
    if (!run) return [];
    return (run.jobs || []).map((j) => {
      const l = live[j.job_id];
      // The events are newer than the GET unless the GET already says the job ended.
      if (!l || (TERMINAL.includes(j.state) && !TERMINAL.includes(l.state || ''))) return j;
      return { ...j, ...l, state: l.state || j.state, error: l.error || j.error };
    });
  }, [run, live]);

  if (error && !run) return html`<h1>Run ${id}</h1><${ErrorLine} error=${error} />`;
  if (!run) return html`<h1>Run ${id}</h1><p>Loading…</p>`;
  const shown = jobs.filter((j) => !filter || j.state === filter);
  const limit = all ? shown.length : 200;
  const ended = run.done + run.failed + run.cancelled_jobs;
  const act = async (what) => {
    try {
      await api(`/runs/${encodeURIComponent(id)}/${what}`, { method: 'POST' });
      await load();
    } catch (e) {
      setError(e);
    }
  };
  const counts = run.states || {};
  return html`
    <h1>Run <span class="mono">${id}</span></h1>
    <p class="sub"><${Link} to="/">← Runs<//> · events: <span data-testid="sse">${sse}</span></p>
    <section class="summary card" aria-label="Counts">
      <${Bar} value=${run.total ? (100 * ended) / run.total : 0} label="run progress" />
      <dl class="counts">
        <div><dt>Total</dt><dd>${run.total}</dd></div>
        ${Object.entries(counts).filter(([, n]) => n).map(([s, n]) => html`<div><dt>${s}</dt><dd>${n}</dd></div>`)}
        ${run.cancelled && html`<div><dt>Run</dt><dd>cancelled</dd></div>`}
      </dl>
      ${(run.stalled || []).map((s) => html`<p class="warn">${s}</p>`)}
      ${canAct(me) && html`<div class="actions">
        <button onClick=${() => act('cancel')} disabled=${run.finished}>Cancel run</button>
        <button onClick=${() => act('resume')}>Resume run</button></div>`}
      <${ErrorLine} error=${error} />
    </section>
    <section aria-labelledby="jobs-h">
      <h2 id="jobs-h">Jobs</h2>
      <label>Show <select value=${filter} onChange=${(e) => setFilter(e.target.value)}>
        <option value="">all states</option>
        ${['queued', 'encode', 'sample', 'transfer', 'decode', 'done', 'failed', 'cancelled'].map((s) => html`<option>${s}</option>`)}
      </select></label>
      <div class="scroll">
      <table class="jobs" data-testid="jobs">
        <thead><tr><th scope="col">Job</th><th scope="col">State</th><th scope="col">Host / pool</th>
          <th scope="col">Steps</th><th scope="col">Attempts</th><th scope="col">Reason</th></tr></thead>
        <tbody>${shown.slice(0, limit).map((j) => html`<tr key=${j.job_id} data-job=${j.job_id} data-state=${j.state}>
          <td><${Link} to=${jobLink(id, j.job_id)}>${j.job_id}<//></td>
          <td class="state"><${StateBadge} state=${j.state} /></td>
          <td>${j.host ? `${j.host} / ${j.pool || ''}` : ''}</td>
          <td>${j.steps ? html`<${Bar} value=${(100 * (j.step || 0)) / j.steps} label=${`${j.job_id} steps`} /> ${j.step || 0}/${j.steps}` : ''}</td>
          <td>${j.attempt || attempts(j) || ''}</td>
          <td class="reason">${j.state === 'failed' || j.state === 'cancelled' ? j.error || '' : ''}</td></tr>`)}
        </tbody></table></div>
      ${shown.length > limit && html`<p><button onClick=${() => setAll(true)}>Show all ${shown.length} jobs</button></p>`}
    </section>
    <${GanttCharts} id=${id} done=${run.done} />`;
}
