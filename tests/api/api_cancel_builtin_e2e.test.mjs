// Cancel frees the pool with the builtin sampler, from HTTP (issue #37 item 5, done-when "Cancel
// frees the pool within the bound above (builtin, ...)": one step + 1 s).  A real local stack whose
// every stage runs the builtin runtime on the CPU (seeded weights), one sample pool: video A
// samples, video B waits for the pool; DELETE /v1/videos/A once A has told two steps; the pool's
// next claim (B's sample stage.started, ts_ms the worker's clock) must come within one of A's steps
// (measured from A's own step events) + 1 s.  Prints the figure.  Run by ctest
// (api_cancel_builtin_e2e); tests/worker/cancel_frees_pool_test covers the worker alone,
// tests/runtime's ComfyProgress the comfyui runtime.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Stack, call, fixed, until } from './stack.mjs';

const config = {
  name: 'api-cancel-builtin',
  queue: { lease_ms: 5000, renew_ms: 1000, sweep_ms: 200, max_deliveries: 3, block_ms: 50 },
  stages: Object.fromEntries(['encode', 'sample', 'decode'].map((s) => [s, { runtime: { name: 'builtin', settings: { threads: 1 } } }])),
  classes: [{ name: 'long', width: 128, height: 96, frames: 9, steps: 200 }],
  hosts: [{ name: 'local' }],
  pools: [
    { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.1) } },
    { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(20) } },
    { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.5) } },
  ],
};
const stack = new Stack('h3cancel-', config);
let base, alice;
before(() => {
  stack.start();
  base = stack.base;
  ({ alice } = stack.tokens(['alice']));
});
after(() => stack.stop());

// The run's events (redis-cli XRANGE: an id line, then its fields and values a line each).
function events(run) {
  const out = [];
  for (const line of stack.redis('XRANGE', `h3pipe:run:{${run}}:events`, '-', '+').split('\n')) {
    if (/^\d+-\d+$/.test(line)) out.push({ id: line, f: [] });
    else out.at(-1)?.f.push(line);
  }
  return out.map((e) => Object.fromEntries(e.f.flatMap((v, i) => (i % 2 ? [] : [[v, e.f[i + 1]]]))));
}

test('DELETE of a video the builtin sampler is sampling frees the pool within one step + 1 s', async () => {
  const a = await call(base, alice, 'POST', '/videos', { prompt: 'a long walk', model: 'long' });
  assert.equal(a.status, 200, a.text);
  const b = await call(base, alice, 'POST', '/videos', { prompt: 'the next one', model: 'long' });
  assert.equal(b.status, 200, b.text);
  const stepsOf = (run) => events(run).filter((e) => e.type === 'step' && e.stage === 'sample');
  await until('A sampling its third step', () => stepsOf(a.json.run_id).length >= 3, 240000, 20);
  // B is encoded and waits for the one sample pool.
  await until('B encoded', () => events(b.json.run_id).some((e) => e.type === 'stage.finished' && e.stage === 'encode'), 60000, 20);
  assert.ok(!events(b.json.run_id).some((e) => e.type === 'stage.started' && e.stage === 'sample'));
  const t0 = Date.now();
  const del = await call(base, alice, 'DELETE', `/videos/${a.json.id}`);
  assert.equal(del.status, 200, del.text);
  const claim = await until('the pool claims B', () => events(b.json.run_id)
    .find((e) => e.type === 'stage.started' && e.stage === 'sample'), 60000, 5);
  const steps = stepsOf(a.json.run_id).map((e) => Number(e.ts_ms));
  const gaps = steps.slice(1).map((t, i) => t - steps[i]).sort((x, y) => x - y);
  const stepMs = gaps.at(-1);  // A's slowest step (the machine is shared)
  const toClaim = Number(claim.ts_ms) - t0;
  console.log(`builtin cancel: DELETE -> the pool's next claim ${toClaim} ms; A's steps ${gaps[0]}..${stepMs} ms ` +
    `(${steps.length} told), bound ${stepMs + 1000} ms; DELETE answered in ${del.status} after ${Date.now() - t0} ms total`);
  assert.ok(toClaim <= stepMs + 1000, `next claim ${toClaim} ms after DELETE, bound ${stepMs + 1000} ms`);
  await until('A cancelled', () => events(a.json.run_id).some((e) => e.type === 'video.cancelled'), 30000);
  assert.equal((await call(base, alice, 'GET', `/videos/${a.json.id}`)).status, 404);
  await call(base, alice, 'DELETE', `/videos/${b.json.id}`);  // frees the CPU for the next test
});
