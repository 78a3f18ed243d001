// h3pipe-api driven by the official openai npm SDK (issue #37, first slice) against a real local
// stack: `h3pipe start` (private redis-server, sim runtime that writes real MP4s), tokens from
// `h3pipe token create`, and h3pipe-api on a free loopback port.  Run by ctest
// (api_videos_sdk_e2e); exits 77 (skipped) when the SDK is not installed (scripts/setup.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { Stack, bin, defaultConfig, until } from './stack.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  console.log(`skipped: the openai npm SDK is not installed in tests/api (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}

const stack = new Stack('h3api-', defaultConfig('api-e2e'));
const { dir, config } = stack;
const cli = (...args) => stack.cli(...args);
const token = (name, role) => stack.token(name, role);

let base, submit, reader, admin, readToken, submitToken;

before(async () => {
  stack.start();
  const { alice, rita, root: adminToken } = stack.tokens(['alice', 'rita', 'root']);
  submitToken = alice;
  readToken = rita;
  assert.match(submitToken, /^h3p_[0-9a-f]{64}$/);
  // Redis keeps only the hash: the token itself is nowhere in the dump of the tokens hash.
  const l = cli('token', 'list');
  assert.equal(l.rc, 0, l.err);
  assert.match(l.out, /alice\tsubmit/);
  assert.ok(!l.out.includes(submitToken));
  // Redis keeps only the token's SHA-256, never the token (read as redis-admin).
  const dump = stack.redis('EVAL',
    "local o = {} for _, k in ipairs(redis.call('KEYS', 'h3pipe:api:*')) do if redis.call('TYPE', k).ok == 'hash' then for _, v in ipairs(redis.call('HGETALL', k)) do o[#o+1] = v end end end return o", '0');
  const sha = createHash('sha256').update(submitToken).digest('hex');
  assert.ok(dump.includes(sha), dump);
  assert.ok(!dump.includes(submitToken.slice(4)), 'a token is stored in clear');
  // `h3pipe start` started h3pipe-api on loopback; its URL is in its run file (and in start's
  // output).
  assert.match(stack.startOut, /api-local +pid \d+ +http:\/\/127\.0\.0\.1:\d+\/v1/);
  assert.equal(stack.runFile().bind, '127.0.0.1');
  base = stack.base;
  submit = new OpenAI({ apiKey: submitToken, baseURL: base, maxRetries: 0 });
  reader = new OpenAI({ apiKey: readToken, baseURL: base, maxRetries: 0 });
  admin = new OpenAI({ apiKey: adminToken, baseURL: base, maxRetries: 0 });
});

after(() => stack.stop());

async function completed(id) {
  return until(`video ${id} completed`, async () => {
    const v = await submit.videos.retrieve(id);
    assert.ok(['queued', 'in_progress', 'completed'].includes(v.status), JSON.stringify(v));
    return v.status === 'completed' && v;
  });
}

function probe(file) {
  const r = spawnSync('ffprobe', ['-v', 'error', '-count_frames', '-select_streams', 'v:0', '-show_entries',
    'stream=width,height,nb_read_frames', '-of', 'json', file], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout).streams[0];
}

test('create (default model), retrieve until completed, content is the MP4 asked for', async () => {
  const v = await submit.videos.create({ prompt: 'a red fox in snow', size: '256x256', seconds: '2' });
  assert.equal(v.object, 'video');
  assert.equal(v.model, 'default');
  assert.equal(v.size, '256x256');
  assert.equal(v.seconds, '2');
  assert.ok(['queued', 'in_progress'].includes(v.status));
  assert.match(v.id, /^video_r-/);
  assert.equal(v.run_id, v.id.slice(6));
  const done = await completed(v.id);
  assert.equal(done.progress, 100);
  assert.ok(done.completed_at >= done.created_at);
  // The same job the CLI sees: one job in the run, done.
  const st = cli('status', v.run_id, '--json');
  assert.equal(st.rc, 0, st.err);
  assert.match(st.out, /"done"/);
  const res = await submit.videos.downloadContent(v.id);
  const mp4 = path.join(dir, 'got.mp4');
  fs.writeFileSync(mp4, Buffer.from(await res.arrayBuffer()));
  const s = probe(mp4);
  assert.deepEqual([s.width, s.height, Number(s.nb_read_frames)], [256, 256, 49]);  // 2 s at 24 fps
  // Range: a browser seeks.
  const part = await fetch(`${base}/videos/${v.id}/content`, { headers: { Authorization: `Bearer ${readToken}`, Range: 'bytes=0-99' } });
  assert.equal(part.status, 206);
  assert.equal((await part.arrayBuffer()).byteLength, 100);

  // List: newest first, with limit and after.
  const page = await reader.videos.list({ limit: 100 });
  assert.ok(page.data.some((x) => x.id === v.id));
  // Pages of one, newest first, followed by the SDK through `after` and has_more.
  const w = await submit.videos.create({ prompt: 'a second one', size: '256x256', seconds: '1' });
  const one = await reader.videos.list({ limit: 1 });
  assert.deepEqual(one.data.map((x) => x.id), [w.id]);
  assert.equal(one.has_more, true);
  const seen = [];
  for await (const x of reader.videos.list({ limit: 1, order: 'asc' })) seen.push(x.id);
  assert.ok(seen.indexOf(v.id) >= 0 && seen.indexOf(v.id) < seen.indexOf(w.id), JSON.stringify(seen));
  // Delete of a finished video: then 404, the MP4 gone from the output root.
  const d = await submit.videos.delete(v.id);
  assert.deepEqual(d, { id: v.id, object: 'video.deleted', deleted: true });
  await assert.rejects(submit.videos.retrieve(v.id), (e) => e.status === 404 && e instanceof OpenAI.NotFoundError);
  await assert.rejects(submit.videos.downloadContent(v.id), (e) => e.status === 404);
  assert.ok(!fs.existsSync(path.join(dir, 'outputs', v.run_id, 'video.mp4')));
  const again = await reader.videos.list({ limit: 100 });
  assert.ok(!again.data.some((x) => x.id === v.id));
});

// openai-node 7.60 sends no header for its idempotencyKey option (its client sets no
// idempotencyHeader), so the header goes in the request options' headers.
const key = (k) => ({ headers: { 'Idempotency-Key': k } });

test('Idempotency-Key: the same body twice is one video and one job; another body is 409', async () => {
  const body = { prompt: 'idempotent heron', size: '256x256', seconds: '1' };
  const runs = () => JSON.parse(cli('status', '--json').out).map((r) => r.run_id);
  const a = await submit.videos.create(body, key('key-1'));
  const before = runs();
  const b = await submit.videos.create(body, key('key-1'));
  assert.equal(a.id, b.id);
  assert.deepEqual(runs(), before);  // no second run
  await completed(a.id);
  const st = JSON.parse(cli('status', a.run_id, '--json').out);
  assert.equal(st.total, 1, JSON.stringify(st));
  assert.equal(st.done, 1, JSON.stringify(st));
  assert.equal((await submit.videos.create(body, key('key-1'))).id, a.id);  // after completion too
  await assert.rejects(submit.videos.create({ ...body, prompt: 'another heron' }, key('key-1')),
    (e) => e.status === 409 && /Idempotency-Key "key-1" was used within 24 h with another request body/.test(e.message));
  const c = await submit.videos.create(body, key('key-2'));
  assert.notEqual(c.id, a.id);
});

test('cancel of a running video keeps it as cancelled; delete then 404', async () => {
  const v = await submit.videos.create({ prompt: 'a slow one', model: 'slow' });
  assert.equal(v.model, 'slow');
  assert.equal(v.size, '128x96');
  await assert.rejects(submit.videos.downloadContent(v.id), (e) => e.status === 404 && /once it is completed/.test(e.message));
  // Another submit token may not cancel alice's video.
  const bob = new OpenAI({ apiKey: token('bob', 'submit'), baseURL: base, maxRetries: 0 });
  await assert.rejects(bob.videos.delete(v.id), (e) => e.status === 403 && /belongs to "alice"/.test(e.message));
  const res = await fetch(`${base}/videos/${v.id}/cancel`, { method: 'POST', headers: { Authorization: `Bearer ${submitToken}` } });
  assert.equal(res.status, 200);
  assert.equal((await res.json()).status, 'cancelled');
  assert.equal((await reader.videos.retrieve(v.id)).status, 'cancelled');
  await admin.videos.delete(v.id);
  await assert.rejects(reader.videos.retrieve(v.id), (e) => e.status === 404);
});

test('typed errors: 400 naming the field, 401, 403, 413', async () => {
  await assert.rejects(submit.videos.create({ prompt: 'x', size: '12x' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'size' && /size: expected "WIDTHxHEIGHT"/.test(e.message));
  // The CLI's words for a size the latent profile refuses.
  await assert.rejects(submit.videos.create({ prompt: 'x', size: '250x256' }),
    (e) => e.status === 400 && e.param === 'size' && /^width: /.test(e.error.message));
  await assert.rejects(submit.videos.create({ size: '256x256' }),
    (e) => e.status === 400 && e.param === 'prompt');
  await assert.rejects(submit.videos.create({ prompt: 'x', model: 'nope' }),
    (e) => e.status === 400 && e.param === 'model');
  const none = await fetch(`${base}/videos`);
  assert.equal(none.status, 401);
  assert.equal((await none.json()).error.type, 'authentication_error');
  const bad = new OpenAI({ apiKey: 'h3p_' + '0'.repeat(64), baseURL: base, maxRetries: 0 });
  await assert.rejects(bad.videos.list(), (e) => e instanceof OpenAI.AuthenticationError);
  await assert.rejects(reader.videos.create({ prompt: 'not allowed' }),
    (e) => e instanceof OpenAI.PermissionDeniedError && /role read/.test(e.message));
  const big = await fetch(`${base}/videos`, { method: 'POST', headers: { Authorization: `Bearer ${submitToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'x'.repeat(1100000) }) });  // over the default 1 MiB
  assert.equal(big.status, 413);
  // A revoked token is refused at once.
  assert.equal(cli('token', 'revoke', 'rita').rc, 0);
  await assert.rejects(reader.videos.list(), (e) => e.status === 401);
});

test('models are the job classes', async () => {
  const m = await submit.models.list();
  assert.deepEqual(m.data.map((x) => x.id).sort(), ['default', 'slow']);
});

test('JSON body: the same job as multipart; seconds as a number', async () => {
  const res = await fetch(`${base}/videos`, { method: 'POST',
    headers: { Authorization: `Bearer ${submitToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'json body', size: '256x256', seconds: 1, steps: 4, seed: 7 }) });
  assert.equal(res.status, 200);
  const v = await res.json();
  assert.equal(v.seconds, '1');
  assert.equal(v.size, '256x256');
  const bad = await fetch(`${base}/videos`, { method: 'POST',
    headers: { Authorization: `Bearer ${submitToken}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'x', colour: 'red' }) });
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).error.param, 'colour');
});

test('503 while Redis is unreachable', async () => {
  // A second API replica whose Redis does not answer: every request that needs Redis is a 503
  // in OpenAI's shape (the SDK's InternalServerError), never a hang or a crash.
  const portFile = path.join(dir, 'api2.port');
  const down = spawn(path.join(bin, 'h3pipe-api'), ['--config', config, '--port', '0', '--port-file', portFile],
    { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, H3PIPE_REDIS_ADDRESS: '127.0.0.1:1' } });
  try {
    const port = await until('the second API port file', () => fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim());
    const c = new OpenAI({ apiKey: submitToken, baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0 });
    await assert.rejects(c.videos.list(), (e) => e.status === 503 && e instanceof OpenAI.InternalServerError &&
      e.error.code === 'redis_unavailable');
  } finally {
    down.kill('SIGTERM');
  }
});
