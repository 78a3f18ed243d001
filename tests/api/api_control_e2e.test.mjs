// Pause, unpause and move first over HTTP (issue #39 item 4; docs/api.md, "Pause, unpause, move
// first") against a real local stack with ONE sampler, so the order it serves is observable: a
// paused run's job is not sampled while a later run's is, and is once unpaused; a job moved first
// is sampled before the jobs queued ahead of it (its receipt's sample start); a video too; who may
// (submit its own, admin any) and the 400/403/404.  Run by ctest (api_control_e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, defaultConfig, fixed, call, until } from './stack.mjs';

const config = defaultConfig('api-control', {
  // "block" holds the one sampler long enough for the requests that follow it to land first.
  classes: [{ name: 'block', width: 128, height: 96, frames: 9, steps: 6 }],
  pools: [
    { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.01) } },
    { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(0.2), block: fixed(2.5) } },
    { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.02) } },
  ],
});
const stack = new Stack('h3control-', config);
let base, alice, bob, rita, root;
before(() => {
  stack.start();
  base = stack.base;
  ({ alice, bob, rita, root } = stack.tokens());
});
after(() => stack.stop());

const line = (id, extra = {}) => JSON.stringify({ jobId: id, prompt: `clip ${id}`, ...extra });
async function submit(tok, ids, extra = {}) {
  const r = await call(base, tok, 'POST', '/runs', ids.map((i) => line(i, extra)).join('\n') + '\n',
    { 'Content-Type': 'application/x-ndjson' });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}
const status = async (run) => (await call(base, rita, 'GET', `/runs/${run}`)).json;
const finished = (run) => until(`run ${run} finished`, async () => (await status(run)).finished, 120000);
async function sampleStart(run, job) {
  const r = await call(base, rita, 'GET', `/jobs/${run}:${job}/receipt`);
  assert.equal(r.status, 200, r.text);
  const s = r.json.stages.find((x) => x.stage === 'STAGE_SAMPLE');
  assert.ok(s, JSON.stringify(r.json.stages));
  return Number(s.startUnixMs);
}

test('pause: nothing of the run is claimed while a later run is served; unpause: it is', async () => {
  const blocker = await submit(alice, ['b'], { jobClass: 'block' });
  const paused = await submit(alice, ['p1', 'p2']);
  const p = await call(base, alice, 'POST', `/runs/${paused}/pause`);
  assert.equal(p.status, 200, p.text);
  assert.deepEqual(p.json, { object: 'run.pause', id: paused, paused: true });
  // The CLI sees the same state: pausing again there is the same answer.
  const cli = stack.cli('pause', paused);
  assert.equal(cli.rc, 0, cli.err);
  const later = await submit(alice, ['l1']);
  await finished(later);
  await finished(blocker);
  // First come, first served would have sampled p1 and p2 before l1: they were skipped.
  const st = await status(paused);
  assert.equal(st.done, 0, JSON.stringify(st.states));
  assert.equal((await call(base, rita, 'GET', `/jobs/${paused}:p1/receipt`)).status, 404);
  const u = await call(base, alice, 'POST', `/runs/${paused}/unpause`);
  assert.equal(u.status, 200, u.text);
  assert.equal(u.json.paused, false);
  await finished(paused);
  assert.equal((await status(paused)).done, 2);
  assert.ok(await sampleStart(paused, 'p1') > await sampleStart(later, 'l1'));
});

test('move first: the moved job is sampled before the jobs queued ahead of it', async () => {
  const blocker = await submit(alice, ['b'], { jobClass: 'block' });
  const run = await submit(alice, ['m1', 'm2', 'm3', 'm4']);
  const m = await call(base, alice, 'POST', `/runs/${run}/jobs/m4/move`, { position: 'first' });
  assert.equal(m.status, 200, m.text);
  assert.deepEqual(m.json, { object: 'job.move', run, job: 'm4', position: 'first' });
  await finished(run);
  await finished(blocker);
  const t4 = await sampleStart(run, 'm4');
  for (const j of ['m1', 'm2', 'm3']) assert.ok(t4 < await sampleStart(run, j), `m4 before ${j}`);
  // And the order of the others is unchanged (first come, first served within the run).
  assert.ok(await sampleStart(run, 'm1') < await sampleStart(run, 'm2'));
});

test('move first of a video (POST /v1/videos/{id}/move)', async () => {
  const blocker = await submit(alice, ['b'], { jobClass: 'block' });
  const create = async (prompt) => {
    const r = await call(base, alice, 'POST', '/videos', { prompt, seconds: '1' });
    assert.equal(r.status, 200, r.text);
    return r.json.id;
  };
  const v1 = await create('first');
  const v2 = await create('second');
  const m = await call(base, alice, 'POST', `/videos/${v2}/move`, { position: 'first' });
  assert.equal(m.status, 200, m.text);
  assert.equal(m.json.id, v2);
  assert.equal(m.json.object, 'video');
  for (const v of [v1, v2])
    await until(`${v} completed`, async () => (await call(base, rita, 'GET', `/videos/${v}`)).json.status === 'completed', 120000);
  await finished(blocker);
  const start = async (v) => sampleStart(v.replace(/^video_/, ''), 'video');
  assert.ok(await start(v2) < await start(v1), 'the moved video was sampled first');
});

test('who may: submit its own, admin any; 400 and 404 name what is wrong', async () => {
  const run = await submit(alice, ['w1']);
  const no = await call(base, bob, 'POST', `/runs/${run}/pause`);
  assert.equal(no.status, 403, no.text);
  assert.match(no.json.error.message, /belongs to "alice"/);
  assert.equal((await call(base, rita, 'POST', `/runs/${run}/pause`)).status, 403);
  assert.equal((await call(base, bob, 'POST', `/runs/${run}/jobs/w1/move`, { position: 'first' })).status, 403);
  assert.equal((await call(base, root, 'POST', `/runs/${run}/pause`)).status, 200);
  assert.equal((await call(base, root, 'POST', `/runs/${run}/unpause`)).status, 200);
  // A run from the CLI: only admin.
  const file = path.join(stack.dir, 'cli.jsonl');
  fs.writeFileSync(file, line('c1') + '\n');
  const r = stack.cli('run', file, '--background');
  assert.equal(r.rc, 0, r.err);
  const cliRun = r.out.trim().split('\n').pop();
  const theirs = await call(base, alice, 'POST', `/runs/${cliRun}/pause`);
  assert.equal(theirs.status, 403, theirs.text);
  assert.match(theirs.json.error.message, /was not submitted over HTTP/);
  assert.equal((await call(base, root, 'POST', `/runs/${cliRun}/pause`)).status, 200);
  assert.equal((await call(base, root, 'POST', `/runs/${cliRun}/unpause`)).status, 200);
  await finished(cliRun);
  const none = await call(base, root, 'POST', '/runs/r-none/pause');
  assert.equal(none.status, 404);
  assert.equal(none.json.error.code, 'not_found');
  const noJob = await call(base, alice, 'POST', `/runs/${run}/jobs/zz/move`, { position: 'first' });
  assert.equal(noJob.status, 404);
  assert.equal(noJob.json.error.param, 'job');
  const bad = await call(base, alice, 'POST', `/runs/${run}/jobs/w1/move`, { position: 'last' });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'position');
  const extra = await call(base, alice, 'POST', `/runs/${run}/jobs/w1/move`, { position: 'first', x: 1 });
  assert.equal(extra.status, 400);
  assert.equal(extra.json.error.param, 'x');
  const notJson = await call(base, alice, 'POST', `/runs/${run}/jobs/w1/move`, 'first', { 'Content-Type': 'application/json' });
  assert.equal(notJson.status, 400);
  assert.equal((await call(base, bob, 'POST', '/videos/video_none/move', { position: 'first' })).status, 404);
  await finished(run);
});
