// The Video's queue_position, receipt_url and expires_at, every job's user in its receipt (HTTP and
// `h3pipe run`), and the pruning of idempotency entries and deleted records by Redis's TTLs (issue
// #37), against a real local stack (stack.mjs).  H3PIPE_API_PRUNE_MS shortens the 24 h window.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Stack, call, defaultConfig, until } from './stack.mjs';

const PRUNE_MS = 4000;
const stack = new Stack('h3vf-', defaultConfig('api-fields'),
  { env: { ...process.env, H3PIPE_API_PRUNE_MS: String(PRUNE_MS) } });
let base, alice, bob, root;

before(() => {
  stack.start();
  ({ alice, bob, root } = stack.tokens(['alice', 'bob', 'root']));
  base = stack.base;
});
after(() => stack.stop());

const create = async (tok, prompt, headers = {}) => {
  const r = await call(base, tok, 'POST', '/videos', { prompt, size: '64x48', seconds: '1' }, headers);
  assert.equal(r.status, 200, r.text);
  return r.json;
};
const get = async (id) => (await call(base, root, 'GET', `/videos/${id}`)).json;

test('queue_position is the live claim order (fair share, not arrival); receipt_url and user once done', async () => {
  // The encoder claims nothing while drained: the tasks wait on the encode stream.
  const d = await call(base, root, 'POST', '/pools/enc/drain');
  assert.equal(d.status, 200, d.text);
  // The worker re-reads its drain flag every 250 ms (worker/drain_flag.h): a task submitted
  // before it has seen the flag could still be claimed.
  await new Promise((r) => setTimeout(r, 1000));
  const a1 = await create(alice, 'alice one');
  const a2 = await create(alice, 'alice two');
  const b1 = await create(bob, 'bob one');
  for (const v of [a1, a2, b1]) {
    assert.equal(v.receipt_url, null);
    assert.equal(v.expires_at, null);
    assert.ok('queue_position' in v, JSON.stringify(v));
  }
  // Accepted by the ingest: each has its place.  Alice's second waits behind bob's first: the
  // fair share charges alice for her first claim (dispatch::pick / charge).
  const pos = await until('three places', async () => {
    const vs = await Promise.all([a1, a2, b1].map((v) => get(v.id)));
    return vs.every((v) => v.status === 'queued' && Number.isInteger(v.queue_position)) && vs.map((v) => v.queue_position);
  }, 30000);
  assert.deepEqual(pos, [1, 3, 2]);
  assert.equal((await call(base, root, 'POST', '/pools/enc/undrain')).status, 200);
  for (const [v, user] of [[a1, 'alice'], [a2, 'alice'], [b1, 'bob']]) {
    const done = await until(`${v.id} completed`, async () => { const g = await get(v.id); return g.status === 'completed' && g; });
    assert.equal(done.queue_position, null);
    assert.equal(done.expires_at, null);
    assert.equal(done.receipt_url, `/v1/jobs/${v.id}/receipt`);
    const rec = await call(stack.origin, user === 'alice' ? alice : bob, 'GET', done.receipt_url);
    assert.equal(rec.status, 200, rec.text);
    assert.equal(rec.json.spec.user, user);
  }
});

test('a job from `h3pipe run` records its user: --user, else the login name', async () => {
  const file = path.join(stack.dir, 'cli.jsonl');
  fs.writeFileSync(file, '{"jobId": "c", "prompt": "from the CLI", "width": 64, "height": 48, "frames": 9}\n');
  for (const [args, user] of [[['--user', 'carol'], 'carol'], [[], os.userInfo().username]]) {
    const sub = stack.cli('run', file, '--background', ...args);
    assert.equal(sub.rc, 0, sub.err);
    const run = sub.out.trim();
    const rec = await until(`receipt of ${run}`, async () => {
      const r = await call(base, root, 'GET', `/jobs/${run}:c/receipt`);
      return r.status === 200 && r.json;
    });
    assert.equal(rec.spec.user, user);
  }
});

test('POST /v1/runs records the token\'s name as each job\'s user; a submit token names no other', async () => {
  const r = await call(base, bob, 'POST', '/runs',
    '{"jobId": "mine", "prompt": "x", "width": 64, "height": 48, "frames": 9}\n' +
    '{"jobId": "other", "prompt": "x", "width": 64, "height": 48, "frames": 9, "user": "mallory"}\n');
  assert.equal(r.status, 201, r.text);
  for (const job of ['mine', 'other']) {
    const rec = await until(`receipt of ${job}`, async () => {
      const g = await call(base, root, 'GET', `/jobs/${r.json.id}:${job}/receipt`);
      return g.status === 200 && g.json;
    });
    assert.equal(rec.spec.user, 'bob');
  }
});

test('idempotency entries and deleted records expire in Redis (no sweeper)', async () => {
  const key = 'prune-1';
  const idem = `h3pipe:api:idempotency:${createHash('sha256').update(`alice:${key}`).digest('hex')}`;
  const v = await create(alice, 'kept once', { 'Idempotency-Key': key });
  const ttl = Number(stack.redis('PTTL', idem));
  assert.ok(ttl > 0 && ttl <= PRUNE_MS, `PTTL ${ttl}`);
  // Within the window: the same video; another body: 409.
  assert.equal((await create(alice, 'kept once', { 'Idempotency-Key': key })).id, v.id);
  const other = await call(base, alice, 'POST', '/videos', { prompt: 'another', size: '64x48', seconds: '1' }, { 'Idempotency-Key': key });
  assert.equal(other.status, 409, other.text);
  await until('the idempotency entry expired', async () => stack.redis('EXISTS', idem) === '0', 20000, 200);
  // After it: the key is free again, a new video.
  const w = await create(alice, 'another', { 'Idempotency-Key': key });
  assert.notEqual(w.id, v.id);
  // A deleted video: 404 at once, out of the list at once, its record gone after the window.
  await until(`${v.id} finished`, async () => ['completed', 'failed'].includes((await get(v.id)).status));
  const del = await call(base, alice, 'DELETE', `/videos/${v.id}`);
  assert.equal(del.status, 200, del.text);
  assert.equal((await call(base, alice, 'GET', `/videos/${v.id}`)).status, 404);
  assert.equal(stack.redis('ZSCORE', 'h3pipe:api:videos', v.id), '');
  const vttl = Number(stack.redis('PTTL', `h3pipe:api:video:${v.id}`));
  assert.ok(vttl > 0 && vttl <= PRUNE_MS, `PTTL ${vttl}`);
  await until('the deleted record expired', async () => stack.redis('EXISTS', `h3pipe:api:video:${v.id}`) === '0', 20000, 200);
  assert.equal((await call(base, alice, 'GET', `/videos/${v.id}`)).status, 404);
  // A video not deleted keeps its record (no TTL).
  assert.equal(stack.redis('PTTL', `h3pipe:api:video:${w.id}`), '-1');
});
