// /ui/fleet — a card per host and pool with a verdict in words, the queue depth per stage;
// drain and undrain a pool (admin).
import { useState } from 'preact/hooks';
import { api, maybe } from './api.js';
import { html, Link, usePoll, canAct, ErrorLine } from './ui.js';

export function verdict(p, drained) {
  if (drained || p.draining) return p.state === 'busy' && p.job_id ? `draining: finishing ${p.job_id}` : 'draining';
  if (p.live === false) return p.said && p.said.startsWith('dead') ? p.said : 'dead: no heartbeat';
  if (p.state === 'busy') return p.job_id ? `busy: ${p.job_id}` : 'busy';
  return p.state || 'idle';
}

// "duty cycle 37 % of the last 60 s": the fraction of the window its heartbeat says it held a task.
export function dutyText(p) {
  if (p.duty_cycle === null || p.duty_cycle === undefined) return 'duty cycle n/a';
  const pct = p.duty_cycle > 0 && p.duty_cycle < 0.005 ? '<1' : Math.round(100 * p.duty_cycle);
  return `duty cycle ${pct} % of the last ${Math.round(p.duty_window_s)} s`;
}

// "GPU 85 % · 30.1 / 80.0 GiB" where NVML reports its GPUs, else "GPU n/a" (a CPU pool).
export function gpuText(p) {
  const g = p.gpu;
  if (!g) return 'GPU n/a';
  const gib = (b) => (b / 2 ** 30).toFixed(1);
  return `GPU ${Math.round(100 * g.utilization)} %${g.devices > 1 ? ` (${g.devices} GPUs)` : ''} · ${gib(g.memory_used_bytes)} / ${gib(g.memory_total_bytes)} GiB`;
}

export function Fleet({ me }) {
  const [fleet, setFleet] = useState(undefined);
  const [drained, setDrained] = useState({});
  const [error, setError] = useState(null);
  const load = async () => {
    try {
      const [f, d] = await Promise.all([maybe('/fleet'), api('/pools/drained')]);
      setFleet(f);
      setDrained(Object.fromEntries(d.data.map((x) => [x.pool, x])));
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  usePoll(load, 1000);
  const toggle = async (pool, on) => {
    try {
      await api(`/pools/${encodeURIComponent(pool)}/${on ? 'drain' : 'undrain'}`, { method: 'POST' });
      await load();
    } catch (e) {
      setError(e);
    }
  };
  const admin = canAct(me, 'admin');
  return html`
    <h1>Fleet</h1>
    <${ErrorLine} error=${error} />
    ${fleet === undefined && html`<p>Loading…</p>`}
    ${fleet === null && html`<p class="warn">This API does not serve GET /v1/fleet yet; drained pools: ${Object.keys(drained).join(', ') || 'none'}.</p>`}
    ${fleet && html`
      <section aria-labelledby="q-h"><h2 id="q-h">Queues</h2>
        <table class="queues" data-testid="queues"><thead><tr><th scope="col">Stage</th><th scope="col">Host</th><th scope="col">Depth</th></tr></thead>
        <tbody>${(fleet.queues || []).map((q) => html`<tr><td>${q.stage}</td><td>${q.host || 'any'}</td><td>${q.depth}</td></tr>`)}</tbody></table>
      </section>
      ${fleet.degraded && html`<p class="warn">${fleet.degraded}</p>`}
      <section aria-labelledby="h-h"><h2 id="h-h">Hosts and pools</h2>
      <div class="hosts">${(fleet.hosts || []).map((h) => html`
        <article class="card host" aria-label=${`host ${h.name}`}>
          <h3>${h.name} <span class=${h.live ? 'ok' : 'bad'}>${h.live ? 'live' : 'dead'}</span></h3>
          <ul class="pools">${(h.pools || []).map((p) => {
            const d = drained[p.pool];
            const v = verdict(p, d);
            return html`<li class="pool" data-pool=${p.pool}>
              <div><strong>${p.pool}</strong> <span class="sub">${p.stage}</span></div>
              <div class="verdict" data-testid="verdict">${v}</div>
              <div class="sub" data-testid="duty">${dutyText(p)}</div>
              <div class="sub" data-testid="gpu">${gpuText(p)}</div>
              ${p.job_id && !d && html`<div class="sub"><${Link} to=${`/jobs/${encodeURIComponent(p.job_id)}`}>${p.job_id}<//></div>`}
              ${admin && html`<button onClick=${() => toggle(p.pool, !d)} aria-label=${`${d ? 'Undrain' : 'Drain'} pool ${p.pool}`}>${d ? 'Undrain' : 'Drain'}</button>`}
            </li>`;
          })}</ul>
        </article>`)}</div></section>`}`;
}
