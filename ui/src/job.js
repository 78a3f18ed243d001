// /ui/jobs/ID (a video id, or RUN:JOB) — the timeline (a span per stage attempt from the
// receipt, and the live stage from the events), the latest preview while it samples, the MP4 in a
// <video> once done, the receipt with its SHA-256 chain; cancel and retry.
import { useEffect, useState } from 'preact/hooks';
import { api, blobUrl, subscribe } from './api.js';
import { html, Link, usePoll, canAct, Bar, StateBadge, ErrorLine, secs } from './ui.js';
import { applyEvent } from './run.js';

const STAGE_OF = { STAGE_ENCODE: 'encode', STAGE_SAMPLE: 'sample', STAGE_TRANSFER: 'transfer', STAGE_DECODE: 'decode', 1: 'encode', 2: 'sample', 3: 'transfer', 4: 'decode' };
const f = (o, ...names) => {
  for (const n of names) if (o[n] !== undefined) return o[n];
  return undefined;
};

// The receipt's stage records as spans {stage, start, end, host, pool, device, attempts, parts}.
export function spansOf(receipt) {
  return ((receipt && receipt.stages) || []).map((s) => ({
    stage: STAGE_OF[s.stage] || String(s.stage).toLowerCase(),
    start: Number(f(s, 'startUnixMs', 'start_unix_ms') || 0),
    end: Number(f(s, 'endUnixMs', 'end_unix_ms') || 0),
    host: s.host, pool: s.pool, device: s.device, attempts: f(s, 'attempts') || 1,
    wait: Number(f(s, 'queueWaitS', 'queue_wait_s') || 0),
    run: Number(f(s, 'runS', 'run_s') || 0), mux: Number(f(s, 'muxS', 'mux_s') || 0),
    wire: Number(f(s, 'wireS', 'wire_s') || 0), verify: Number(f(s, 'verifyS', 'verify_s') || 0),
    out: f(s, 'outputSha256', 'output_sha256') || '', in: f(s, 'inputSha256', 'input_sha256') || '',
  }));
}

function Timeline({ spans }) {
  if (!spans.length) return html`<p>No stage has started yet.</p>`;
  const t0 = Math.min(...spans.map((s) => s.start - s.wait * 1000));
  const t1 = Math.max(...spans.map((s) => s.end || Date.now()));
  const w = Math.max(1, t1 - t0);
  const pct = (t) => `${(100 * (t - t0)) / w}%`;
  return html`<ol class="timeline" data-testid="timeline" aria-label="Stage attempts">${spans.map((s) => {
    const waitStart = s.start - s.wait * 1000;
    const detail = [s.wait && `queue ${secs(s.wait)}`, s.run && `run ${secs(s.run)}`, s.wire && `wire ${secs(s.wire)}`,
      s.verify && `verify ${secs(s.verify)}`, s.mux && `mux ${secs(s.mux)}`].filter(Boolean).join(', ');
    return html`<li class=${`span st-${s.stage}${s.end ? '' : ' live'}`}>
      <span class="label">${s.stage} · ${s.host || '?'} / ${s.pool || '?'}${s.device ? ` · ${s.device}` : ''} · attempt ${s.attempts}</span>
      <span class="track">
        ${s.wait > 0 && html`<span class="wait" style=${`left:${pct(waitStart)};width:${pct(t0 + (s.start - waitStart))}`}></span>`}
        <span class="run" style=${`left:${pct(s.start)};width:${pct(t0 + Math.max((s.end || Date.now()) - s.start, w / 200))}`}></span>
      </span>
      <span class="sub">${s.end ? secs((s.end - s.start) / 1000) : 'running'}${detail ? ` (${detail})` : ''}</span></li>`;
  })}</ol>`;
}

export function Job({ id, me }) {
  const isVideo = id.startsWith('video_');
  const [run, job] = isVideo ? [id.slice(6), 'video'] : id.split(':');
  const [video, setVideo] = useState(null);
  const [state, setState] = useState(null);  // {state, error, ...} from the run status
  const [live, setLive] = useState({});
  const [liveSpans, setLiveSpans] = useState([]);
  const [receipt, setReceipt] = useState(null);
  const [mp4, setMp4] = useState('');
  const [preview, setPreview] = useState('');
  const [error, setError] = useState(null);
  const [sse, setSse] = useState('connecting');

  const load = async () => {
    try {
      if (isVideo) {
        const v = await api(`/videos/${id}`);
        setVideo(v);
        setState({ state: v.status === 'completed' ? 'done' : v.status === 'in_progress' ? v.stage : v.status,
          error: v.error && v.error.message });
      } else {
        const r = await api(`/runs/${encodeURIComponent(run)}`);
        setState((r.jobs || []).find((j) => j.job_id === job) || { state: 'unknown' });
      }
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  usePoll(load, sse === 'live' ? 3000 : 1000, [id, sse === 'live']);
  const st = (state && state.state) || '';
  const done = st === 'done';
  useEffect(() => {
    // The receipt, once the job is done (it is written with the decode's completion).
    if (!done) return;
    api(`/jobs/${encodeURIComponent(isVideo ? id : `${run}:${job}`)}/receipt`).then(setReceipt, () => setReceipt(null));
    if (isVideo) blobUrl(`/videos/${id}/content`).then(setMp4, (e) => setError(e));
  }, [id, done]);
  useEffect(() => () => mp4 && URL.revokeObjectURL(mp4), [mp4]);
  useEffect(() => {
    setLiveSpans([]);
    const path = isVideo ? `/videos/${id}/events` : `/runs/${encodeURIComponent(run)}/events`;
    return subscribe(path, (ev) => {
      const d = ev.data || {};
      if (d.job && d.job !== job) return;
      setLive((j) => applyEvent(j, ev));
      const ts = Number(d.ts_ms) || Date.now();
      if (ev.type === 'stage.started')
        setLiveSpans((s) => [...s, { stage: d.stage, start: ts, end: 0, host: d.host, pool: d.pool, attempts: d.attempt || 1, wait: 0 }]);
      else if (ev.type === 'stage.finished' || ev.type === 'video.failed' || ev.type === 'video.cancelled')
        setLiveSpans((s) => s.map((x) => (!x.end && (!d.stage || x.stage === d.stage) ? { ...x, end: ts } : x)));
      else if (ev.type === 'video.queued') load();
      if (ev.type === 'preview' && d.image)
        setPreview(d.image.startsWith('data:') ? d.image : `data:image/${d.format || 'jpeg'};base64,${d.image}`);
    }, setSse);
  }, [id]);

  const act = async (what) => {
    try {
      const path = isVideo ? `/videos/${id}/${what}` : `/runs/${encodeURIComponent(run)}/${what === 'retry' ? 'resume' : what}`;
      await api(path, { method: 'POST' });
      setMp4('');
      setReceipt(null);
      setLive({});
      setLiveSpans([]);
      await load();
    } catch (e) {
      setError(e);
    }
  };
  const spans = receipt ? spansOf(receipt) : liveSpans;
  const running = st && !['done', 'failed', 'cancelled', 'unknown'].includes(st);
  const step = live.steps ? live : null;
  return html`
    <h1>Job <span class="mono">${id}</span></h1>
    <p class="sub"><${Link} to=${`/runs/${encodeURIComponent(run)}`}>← Run ${run}<//> · events: <span data-testid="sse">${sse}</span></p>
    <${ErrorLine} error=${error} />
    <section class="card job-head" aria-label="State">
      <p>State: <span data-testid="job-state"><${StateBadge} state=${st || '…'} /></span>
        ${video && html` · ${video.model} · ${video.size} · ${video.seconds} s · by ${video.user}`}
        ${live.host && html` · on ${live.host} / ${live.pool}`}</p>
      ${video && html`<p class="prompt">${video.prompt}</p>`}
      ${video && html`<${Bar} value=${video.progress} label="progress" />`}
      ${step && running && html`<p data-testid="steps">Step ${step.step}/${step.steps}</p>`}
      ${(st === 'failed' || st === 'cancelled') && state.error && html`<p class="reason">${state.error}</p>`}
      ${canAct(me) && html`<div class="actions">
        <button onClick=${() => act('cancel')} disabled=${!running}>Cancel</button>
        <button onClick=${() => act('retry')} disabled=${st !== 'failed' && st !== 'cancelled'}>Retry</button></div>`}
    </section>
    ${preview && running && html`<section class="card" aria-labelledby="prev-h"><h2 id="prev-h">Preview</h2>
      <img class="preview" data-testid="preview" src=${preview} alt="The latest preview frame while it samples" /></section>`}
    ${mp4 && html`<section class="card" aria-labelledby="vid-h"><h2 id="vid-h">Video</h2>
      <video data-testid="video" src=${mp4} controls loop playsinline aria-label="The finished video"></video></section>`}
    <section class="card" aria-labelledby="tl-h"><h2 id="tl-h">Timeline</h2><${Timeline} spans=${spans} /></section>
    ${receipt && html`<section class="card" aria-labelledby="rc-h"><h2 id="rc-h">Receipt</h2>
      <ol class="chain" aria-label="SHA-256 chain">${spansOf(receipt).map((s) => html`<li><strong>${s.stage}</strong>
        <span class="mono">${(s.in || '').slice(0, 16)} → ${(s.out || '').slice(0, 16)}</span></li>`)}
        <li><strong>mp4</strong> <span class="mono">${(f(receipt, 'mp4Sha256', 'mp4_sha256') || '').slice(0, 16)}</span></li></ol>
      <details><summary>The whole receipt</summary><pre data-testid="receipt">${JSON.stringify(receipt, null, 2)}</pre></details></section>`}`;
}
