// h3pipe's own resources over HTTP (issue #37 item 2) against a real local stack: POST /v1/runs
// (JSON lines and a JSON array, per-line errors as `h3pipe run` words them), GET /v1/runs and
// /v1/runs/{id} (the same JSON as `h3pipe status --json`), cancel, resume (the same outcome as
// `h3pipe resume`), a job's receipt, the fleet; and the per-token rate limit (429, Retry-After,
// the SDK's RateLimitError).  Run by ctest (api_runs_e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, defaultConfig, call, until } from './stack.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  console.log(`skipped: the openai npm SDK is not installed in tests/api (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}

const stack = new Stack('h3runs-', defaultConfig('api-runs'));
let base, alice, bob, rita, root;
before(() => {
  stack.start();
  base = stack.base;
  ({ alice, bob, rita, root } = stack.tokens());
});
after(() => stack.stop());

const finished = (id) => until(`run ${id} finished`, async () => {
  const r = await call(base, rita, 'GET', `/runs/${id}`);
  assert.equal(r.status, 200, r.text);
  return r.json.finished && r.json;
});

test('POST /v1/runs (JSON lines) makes a run; GET /v1/runs/{id} is `status --json`', async () => {
  const lines = '{"jobId": "a", "prompt": "a fox"}\n# a comment\n{"jobId": "b", "prompt": "a cat", "frames": 9}\n';
  const r = await call(base, alice, 'POST', '/runs', lines, { 'Content-Type': 'application/x-ndjson' });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.object, 'run');
  assert.equal(r.json.submitted, 2);
  assert.equal(r.json.expected, 2);
  const id = r.json.id;
  const done = await finished(id);
  assert.equal(done.done, 2);
  const cli = stack.cli('status', id, '--json');
  assert.equal(cli.rc, 0, cli.err);
  const st = JSON.parse(cli.out);
  for (const k of ['run_id', 'total', 'done', 'failed', 'cancelled', 'cancelled_jobs', 'finished', 'stages', 'states',
    'illegal_transitions', 'refused_submissions', 'refused', 'jobs', 'degraded', 'created_unix_ms'])
    assert.deepEqual(done[k], st[k], k);
  assert.deepEqual(done.pools.map((p) => p.pool), st.pools.map((p) => p.pool));
  // The list has it, newest first.
  const l = await call(base, rita, 'GET', '/runs?limit=5');
  assert.equal(l.status, 200);
  assert.equal(l.json.object, 'list');
  assert.equal(l.json.data[0].id, id);
  assert.equal(l.json.data[0].done, 2);
  // The receipt of job a: the one Redis holds, the same JSON as on the output root.
  const rec = await call(base, rita, 'GET', `/jobs/${id}:a/receipt`);
  assert.equal(rec.status, 200, rec.text);
  const onDisk = JSON.parse(fs.readFileSync(st.jobs.find((j) => j.job_id === 'a').receipt, 'utf8'));
  assert.deepEqual(rec.json, onDisk);
  const missing = await call(base, rita, 'GET', `/jobs/${id}:zz/receipt`);
  assert.equal(missing.status, 404);
  assert.equal(missing.json.error.code, 'not_found');
  assert.equal((await call(base, rita, 'GET', '/jobs/..%2Fetc:a/receipt')).status, 404);
  // Resume of a finished run re-enqueues nothing, as `h3pipe resume` says.
  const res = await call(base, alice, 'POST', `/runs/${id}/resume`);
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.done, 2);
  assert.equal(res.json.encode + res.json.sample + res.json.decode, 0);
  const cliResume = stack.cli('resume', id);
  assert.equal(cliResume.rc, 0, cliResume.err);
  assert.equal(cliResume.out.trim(), res.json.summary);
});

test('POST /v1/runs as a JSON array with ?run_id; the same run id again is one run', async () => {
  const batch = [{ jobId: 'x', prompt: 'one' }, { jobId: 'y', prompt: 'two' }];
  const r = await call(base, alice, 'POST', '/runs?run_id=r-array-1', batch);
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.id, 'r-array-1');
  const again = await call(base, alice, 'POST', '/runs?run_id=r-array-1', batch);
  assert.equal(again.status, 201, again.text);
  assert.equal(again.json.submitted, 2);
  const other = await call(base, alice, 'POST', '/runs?run_id=r-array-1', [{ jobId: 'x', prompt: 'changed' }]);
  assert.equal(other.status, 409);
  assert.match(other.json.error.message, /line 1: jobId "x" already exists in run r-array-1 with another spec/);
  const theirs = await call(base, bob, 'POST', '/runs?run_id=r-array-1', batch);
  assert.equal(theirs.status, 403);
  assert.equal((await call(base, alice, 'POST', '/runs?run_id=../x', batch)).status, 400);
  await finished('r-array-1');
});

test('a batch with bad lines: 400 naming every line as `h3pipe run` does, nothing submitted', async () => {
  const lines = ['{"jobId": "ok", "prompt": "fine"}', '{"jobId": "w", "prompt": "x", "width": 12}', 'not json',
    '{"jobId": "u", "prompt": "x", "colour": "red"}'];
  const file = path.join(stack.dir, 'bad.jsonl');
  fs.writeFileSync(file, lines.join('\n') + '\n');
  const cli = stack.cli('run', file, '--background');
  assert.equal(cli.rc, 2);
  const cliErrors = cli.err.split('\n').filter((l) => l.startsWith(file + ':')).map((l) => 'line ' + l.slice(file.length + 1));
  assert.equal(cliErrors.length, 3, cli.err);
  const before = (await call(base, rita, 'GET', '/runs?limit=100')).json.data.length;
  for (const body of [lines.join('\n'), null]) {
    const r = body === null
      ? await call(base, alice, 'POST', '/runs', JSON.stringify(lines.map((l) => { try { return JSON.parse(l); } catch { return l; } })), { 'Content-Type': 'application/json' })
      : await call(base, alice, 'POST', '/runs', body, { 'Content-Type': 'application/x-ndjson' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'invalid_batch');
    assert.deepEqual(r.json.error.errors.map((e) => e.line), [2, 3, 4]);
    if (body !== null) assert.deepEqual(r.json.error.errors.map((e) => e.message), cliErrors);
    assert.match(r.json.error.message, /^line 2: width: /);
  }
  assert.equal((await call(base, rita, 'GET', '/runs?limit=100')).json.data.length, before);
  const empty = await call(base, alice, 'POST', '/runs', '  \n');
  assert.equal(empty.status, 400);
  assert.equal(empty.json.error.param, 'body');
  const badArray = await call(base, alice, 'POST', '/runs', '[{"jobId": ', { 'Content-Type': 'application/json' });
  assert.equal(badArray.status, 400);
  assert.equal((await call(base, rita, 'POST', '/runs', '{"prompt": "x"}')).status, 403);
  assert.equal((await call(base, 'nope', 'GET', '/runs')).status, 401);
});

test('cancel a running run: its owner or admin, 403 for another submit token, 404 unknown', async () => {
  const r = await call(base, alice, 'POST', '/runs', '{"jobId": "s", "prompt": "slow", "jobClass": "slow"}\n');
  assert.equal(r.status, 201, r.text);
  const id = r.json.id;
  await until('sampling', async () => (await call(base, rita, 'GET', `/runs/${id}`)).json.states.sample >= 1);
  assert.equal((await call(base, bob, 'POST', `/runs/${id}/cancel`)).status, 403);
  assert.equal((await call(base, rita, 'POST', `/runs/${id}/cancel`)).status, 403);
  assert.equal((await call(base, alice, 'POST', '/runs/r-no-such-run/cancel')).status, 404);
  const c = await call(base, alice, 'POST', `/runs/${id}/cancel`);
  assert.equal(c.status, 200, c.text);
  assert.equal(c.json.cancelled, true);
  assert.equal(JSON.parse(stack.cli('status', id, '--json').out).cancelled, true);
  // A CLI run has no HTTP owner: only admin changes it.
  const file = path.join(stack.dir, 'one.jsonl');
  fs.writeFileSync(file, '{"jobId": "c", "prompt": "from the CLI"}\n');
  const sub = stack.cli('run', file, '--background');
  assert.equal(sub.rc, 0, sub.err);
  const cliRun = sub.out.trim();
  const no = await call(base, alice, 'POST', `/runs/${cliRun}/cancel`);
  assert.equal(no.status, 403);
  assert.match(no.json.error.message, /was not submitted over HTTP/);
  assert.equal((await call(base, root, 'POST', `/runs/${cliRun}/resume`)).status, 200);
  assert.equal((await call(base, rita, 'GET', '/runs/r-no-such-run')).status, 404);
});

test('GET /v1/fleet: hosts, pools with their heartbeats, queue depth per stage', async () => {
  const f = await call(base, rita, 'GET', '/fleet');
  assert.equal(f.status, 200, f.text);
  assert.equal(f.json.object, 'fleet');
  assert.equal(f.json.hosts.length, 1);
  const h = f.json.hosts[0];
  assert.equal(h.name, 'local');
  assert.equal(h.live, true);
  assert.equal(h.dead, false);
  assert.deepEqual(h.pools.map((p) => p.pool).sort(), ['dec', 'enc', 's0', 's1']);
  for (const p of h.pools) {
    assert.equal(p.live, true, JSON.stringify(p));
    assert.ok(p.heartbeat_age_s >= 0 && p.heartbeat_age_s < 3, JSON.stringify(p));
    assert.equal(typeof p.draining, 'boolean');
  }
  // A pool the operator drained (keys::drained_pools(), as the console's drain writes it).
  const st = JSON.parse(fs.readFileSync(path.join(stack.dir, 'stack.json'), 'utf8'));
  const pw = fs.readFileSync(path.join(stack.dir, 'secrets', 'redis-admin.password'), 'utf8').trim();
  const where = st.redis.host.startsWith('/') ? ['-s', st.redis.host] : ['-h', st.redis.host, '-p', String(st.redis.port)];
  const cli = (...a) => spawnSync('redis-cli', [...where, '--user', 'redis-admin', '--pass', pw, '--no-auth-warning', ...a], { encoding: 'utf8' });
  assert.equal(cli('HSET', 'h3pipe:pools:drained', 's1', '{"by":"root","at_ms":1}').status, 0);
  const d = await call(base, rita, 'GET', '/fleet');
  assert.deepEqual(d.json.hosts[0].pools.filter((p) => p.draining).map((p) => p.pool), ['s1']);
  cli('HDEL', 'h3pipe:pools:drained', 's1');
  assert.deepEqual(f.json.queues.map((q) => q.stage).sort(), ['decode', 'encode', 'sample']);
  for (const q of f.json.queues) assert.ok(Number.isInteger(q.depth) && q.depth >= 0);
  assert.equal(typeof f.json.queue_depth.sample, 'number');
});

test('rate limit per token: 429 with Retry-After and rate_limit_exceeded, the SDK\'s RateLimitError', async () => {
  const limited = stack.token('lim', 'read');
  const set = stack.cli('token', 'limit', 'lim', '3');
  assert.equal(set.rc, 0, set.err);
  assert.equal(stack.cli('token', 'limit', 'nobody', '3').rc, 1);
  assert.equal(stack.cli('token', 'limit', 'lim', 'fast').rc, 2);
  const got = [];
  for (let i = 0; i < 8; i++) got.push(await call(base, limited, 'GET', '/models'));
  const refused = got.filter((r) => r.status === 429);
  assert.ok(refused.length >= 4, got.map((r) => r.status).join(','));
  assert.ok(got.slice(0, 3).every((r) => r.status === 200), got.map((r) => r.status).join(','));
  const e = refused[0];
  assert.equal(e.json.error.code, 'rate_limit_exceeded');
  assert.equal(e.json.error.type, 'requests');
  assert.ok(Number(e.headers.get('retry-after')) >= 1);
  const ms = Number(e.headers.get('retry-after-ms'));
  assert.ok(ms >= 1 && ms <= 2000, String(ms));
  const sdk = new OpenAI({ apiKey: limited, baseURL: base, maxRetries: 0 });
  await assert.rejects(sdk.models.list(), (x) => x instanceof OpenAI.RateLimitError && x.status === 429);
  // After Retry-After it answers again; the SDK's own retries honour it.
  await new Promise((r) => setTimeout(r, ms + 50));
  const retrying = new OpenAI({ apiKey: limited, baseURL: base, maxRetries: 3 });
  for (let i = 0; i < 6; i++) await retrying.models.list();
  // Other tokens are not affected; removing the limit lifts it.
  assert.equal((await call(base, rita, 'GET', '/models')).status, 200);
  assert.equal(stack.cli('token', 'limit', 'lim', '0').rc, 0);
  for (let i = 0; i < 10; i++) assert.equal((await call(base, limited, 'GET', '/models')).status, 200);
});
