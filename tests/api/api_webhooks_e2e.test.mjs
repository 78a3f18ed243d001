// Webhooks of h3pipe-api (issue #37 item 6) against a real local stack (`h3pipe start`, the API it
// starts and restarts): endpoints from `h3pipe webhook add`, terminal events from the global
// stream h3pipe:events (written here as the producers write them: the contract's fields and
// `run`), every delivery verified by the official openai SDK's `webhooks.unwrap()`.  A receiver
// that answers 500 twice gets the same webhook-id a third time; one that always fails is
// dead-lettered and listed; an API killed mid-delivery delivers once it is back.
// Run by ctest (api_webhooks_e2e); exits 77 when the SDK is not installed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, fixed, until } from './stack.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  console.log(`skipped: the openai npm SDK is not installed in tests/api (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}

// Retries 300 ms apart (doubling), 2 s per attempt, dead-lettered 4 s after the first attempt.
const env = { ...process.env, H3PIPE_WEBHOOK_RETRY_MS: '300', H3PIPE_WEBHOOK_TIMEOUT_MS: '2000', H3PIPE_WEBHOOK_GIVE_UP_MS: '4000' };
const stack = new Stack('h3hooks-', {
  name: 'api-webhooks-e2e',
  queue: { lease_ms: 1500, renew_ms: 300, sweep_ms: 200, max_deliveries: 3, block_ms: 50 },
  classes: [{ name: 'slow', width: 128, height: 96, frames: 9, steps: 6 }],
  hosts: [{ name: 'local' }],
  pools: [
    { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.01) } },
    { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(0.1), slow: fixed(600) } },
    { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.02) } },
  ],
}, { env });
const { dir } = stack;
const cli = (...args) => stack.cli(...args);
const lastLine = (s) => s.trim().split('\n').pop();
// A terminal event as the producers write it (the events contract).
const terminal = (run, type, extra = {}) =>
  stack.redis('XADD', 'h3pipe:events', 'MAXLEN', '~', '100000', '*', ...Object.entries({ type, job: 'video', run, ts_ms: String(Date.now()), ...extra }).flat());

// The receivers: one server, a path each; every delivery is checked with the SDK.
const sdk = new OpenAI({ apiKey: 'unused', baseURL: 'http://127.0.0.1:9/v1' });
const got = {};       // path -> [{id, event, attempt}]
const secrets = {};   // path -> whsec_
const behave = {};    // path -> (attemptOfThisId) => status | 'hang'
const hung = [];
const receiver = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', async () => {
    const p = req.url;
    const list = (got[p] ??= []);
    let event, error;
    try {
      event = await sdk.webhooks.unwrap(body, req.headers, secrets[p]);
    } catch (e) {
      error = e.message;
    }
    const id = req.headers['webhook-id'];
    const attempt = list.filter((x) => x.id === id).length + 1;
    list.push({ id, event, error, attempt, body });
    const how = (behave[p] ?? (() => 200))(attempt);
    if (how === 'hang') { hung.push(res); return; }
    res.writeHead(how).end();
  });
});
let url;
// The API's port now (the supervisor restarts a killed API on a new one).
const apiPort = () => stack.runFile().health_port;

let tok;
before(async () => {
  stack.start();
  tok = stack.token('alice', 'submit');
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  url = (p) => `http://127.0.0.1:${receiver.address().port}${p}`;
});
after(() => {
  for (const r of hung) r.destroy();
  receiver.close();
  stack.stop();
});

function add(p, ...flags) {
  const r = cli('webhook', 'add', url(p), ...flags);
  assert.equal(r.rc, 0, r.err);
  const secret = lastLine(r.out);
  assert.match(secret, /^whsec_[A-Za-z0-9+/]+=*$/);
  secrets[p] = secret;
  return { secret, id: r.err.match(/endpoint (we_[0-9a-f]+)/)[1] };
}

async function video() {
  // A slow video: it stays in sampling, so the only terminal events are the test's.
  const res = await fetch(`http://127.0.0.1:${apiPort()}/v1/videos`, {
    method: 'POST', headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'a heron', model: 'slow' }),
  });
  assert.equal(res.status, 200);
  return res.json();
}

test('a real job\'s completion, written by the pipeline itself, is delivered and verifies', async () => {
  const a = add('/real');
  const res = await fetch(`http://127.0.0.1:${apiPort()}/v1/videos`, {
    method: 'POST', headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'a real heron', size: '256x256', seconds: '1' }),
  });
  assert.equal(res.status, 200);
  const v = await res.json();
  const d = await until('the completion webhook', () => got['/real']?.find((x) => x.event?.data?.id === v.id), 60000);
  assert.equal(d.error, undefined, d.error);
  assert.equal(d.event.type, 'video.completed');
  assert.match(d.id, new RegExp(`^msg_\\d+-\\d+_${a.id}$`));
  assert.equal(cli('webhook', 'remove', a.id).rc, 0);
});

test('webhook add / list / remove: the secret is the last line, never listed; bad input is refused naming the field', () => {
  const a = add('/list-only');
  const l = cli('webhook', 'list');
  assert.equal(l.rc, 0, l.err);
  assert.match(l.out, new RegExp(`^endpoint\\t${a.id}\\t${url('/list-only').replace(/[/.]/g, '\\$&')}\\t\\*\\tvideo.completed,video.failed,video.cancelled$`, 'm'));
  assert.ok(!l.out.includes(a.secret.slice(6)));
  const bad = cli('webhook', 'add', 'ftp://example.com/x');
  assert.notEqual(bad.rc, 0);
  assert.match(bad.err, /URL: expected an absolute http:\/\/ or https:\/\/ URL/);
  const badEv = cli('webhook', 'add', url('/x'), '--events', 'video.done');
  assert.notEqual(badEv.rc, 0);
  assert.match(badEv.err, /--events: unknown event type "video.done"/);
  assert.equal(cli('webhook', 'remove', a.id).rc, 0);
  assert.ok(!cli('webhook', 'list').out.includes(a.id));
  assert.notEqual(cli('webhook', 'remove', a.id).rc, 0);
});

test('every delivery verifies with the SDK\'s webhooks.unwrap(); --events and --user filter; OpenAI\'s event shape', async () => {
  const a = add('/all');
  const b = add('/bob-failed', '--events', 'video.failed', '--user', 'bob');
  const v = await video();
  const entry = terminal(v.run_id, 'video.completed', { stage: 'decode' });
  await until('the delivery to /all', () => got['/all']?.length === 1);
  const d = got['/all'][0];
  assert.equal(d.error, undefined, d.error);
  assert.equal(d.id, `msg_${entry}_${a.id}`);
  assert.deepEqual(d.event, {
    object: 'event', id: `evt_${entry}`, type: 'video.completed', created_at: d.event.created_at,
    data: { id: v.id, run_id: v.run_id, job_id: 'video' },
  });
  assert.ok(Math.abs(d.event.created_at - Date.now() / 1000) < 60);
  // Another secret does not verify it (the SDK's check is real).
  await assert.rejects(sdk.webhooks.unwrap(d.body, { 'webhook-id': d.id, 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': 'v1,AAAA' }, b.secret));
  // alice's failed video: /all gets it, /bob-failed (bob's only) does not.
  terminal(v.run_id, 'video.failed', { reason: 'sampler: out of memory' });
  await until('the failed one to /all', () => got['/all'].length === 2);
  assert.equal(got['/all'][1].event.type, 'video.failed');
  assert.equal(got['/all'][1].event.data.reason, 'sampler: out of memory');
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(got['/bob-failed'], undefined);
  assert.equal(cli('webhook', 'remove', a.id).rc, 0);
  assert.equal(cli('webhook', 'remove', b.id).rc, 0);
});

test('a receiver that answers 500 twice gets the same webhook-id a third time, then nothing is pending', async () => {
  behave['/flaky'] = (attempt) => (attempt <= 2 ? 500 : 200);
  const f = add('/flaky');
  const v = await video();
  const entry = terminal(v.run_id, 'video.completed');
  await until('three attempts', () => got['/flaky']?.length === 3);
  assert.deepEqual(got['/flaky'].map((x) => [x.id, x.attempt, x.error]), [1, 2, 3].map((n) => [`msg_${entry}_${f.id}`, n, undefined]));
  await until('nothing pending', () => /^pending\t0$/m.test(cli('webhook', 'list').out));
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(got['/flaky'].length, 3);
  // Counted by outcome on the API's Prometheus port (this API has made no other failed attempt).
  const mport = stack.runFile().metrics_port;
  const metrics = await (await fetch(`http://127.0.0.1:${mport}/metrics`)).text();
  const count = (o) => Number(metrics.match(new RegExp(`^h3pipe_api_webhook_deliveries_total\\{outcome="${o}"\\} (\\d+)`, 'm'))?.[1]);
  assert.equal(count('retried'), 2, metrics);
  assert.ok(count('delivered') >= 3, metrics);
  assert.equal(cli('webhook', 'remove', f.id).rc, 0);
});

test('a receiver that always fails is dead-lettered after the give-up time and listed', async () => {
  behave['/down'] = () => 503;
  const d = add('/down');
  const v = await video();
  const entry = terminal(v.run_id, 'video.cancelled', { reason: 'cancelled by alice' });
  const line = await until('the dead letter', () => cli('webhook', 'list').out.split('\n').find((l) => l.startsWith(`dead\tmsg_${entry}_${d.id}\t`)));
  const [, , u, type, attempts, why] = line.split('\t');
  assert.deepEqual([u, type, why], [url('/down'), 'video.cancelled', 'HTTP 503']);
  assert.ok(Number(attempts) >= 3 && Number(attempts) === got['/down'].length, line);
  assert.ok(got['/down'].every((x) => x.id === `msg_${entry}_${d.id}` && !x.error));
  assert.equal(cli('webhook', 'remove', d.id).rc, 0);
});

test('the API killed mid-delivery (and events written while it is down) are delivered once it is back', async () => {
  let hang = true;
  behave['/restart'] = () => (hang ? 'hang' : 200);
  const e = add('/restart');
  const v = await video();
  const first = terminal(v.run_id, 'video.completed');
  await until('the first attempt', () => got['/restart']?.length === 1);
  const pid = stack.runFile().pid;
  process.kill(pid, 'SIGKILL');
  const second = terminal(v.run_id, 'video.failed', { reason: 'while the API was down' });
  hang = false;
  // The supervisor restarts it; a claim older than a delivery can take is retried.
  await until('the API back', () => {
    try { return stack.runFile().pid !== pid; } catch { return false; }
  });
  await until('both delivered', () => got['/restart'].some((x) => x.id.startsWith(`msg_${first}_`) && x.attempt === 2) &&
    got['/restart'].some((x) => x.id === `msg_${second}_${e.id}`), 30000);
  assert.ok(got['/restart'].every((x) => !x.error));
  assert.deepEqual([...new Set(got['/restart'].map((x) => x.id))].sort(), [`msg_${first}_${e.id}`, `msg_${second}_${e.id}`].sort());
  await until('nothing pending', () => /^pending\t0$/m.test(cli('webhook', 'list').out));
  // The API logged its deliveries, and never a secret.
  const logs = fs.readdirSync(path.join(dir, 'logs')).map((f) => fs.readFileSync(path.join(dir, 'logs', f), 'utf8')).join('\n');
  assert.match(logs, new RegExp(`webhook msg_${second}_${e.id} to .*: delivered`));
  for (const s of Object.values(secrets)) assert.ok(!logs.includes(s.slice(6)), 'a secret in a log');
});

test('a request\'s own webhook_url: refused (400 naming the field) unless its host is allowed, then signed with that host\'s secret', async () => {
  const post = (body) => fetch(`http://127.0.0.1:${apiPort()}/v1/videos`, {
    method: 'POST', headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'own hook', model: 'slow', ...body }),
  });
  const refused = await post({ webhook_url: url('/own') });
  assert.equal(refused.status, 400);
  const err = (await refused.json()).error;
  assert.equal(err.param, 'webhook_url');
  assert.match(err.message, /webhook_url: the host "127.0.0.1" is not on the operator's webhook allowlist/);
  const bad = await post({ webhook_url: 'file:///etc/passwd' });
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error.message, /webhook_url: expected an absolute http:\/\/ or https:\/\/ URL/);
  const a = cli('webhook', 'allow', '127.0.0.1');
  assert.equal(a.rc, 0, a.err);
  secrets['/own'] = lastLine(a.out);
  assert.match(secrets['/own'], /^whsec_/);
  assert.match(cli('webhook', 'list').out, /^allow\t127\.0\.0\.1$/m);
  const ok = await post({ webhook_url: url('/own') });
  assert.equal(ok.status, 200);
  const v = await ok.json();
  const entry = terminal(v.run_id, 'video.completed');
  await until('the delivery to the request\'s own URL', () => got['/own']?.length === 1);
  assert.equal(got['/own'][0].error, undefined, got['/own'][0].error);
  assert.equal(got['/own'][0].id, `msg_${entry}_url`);
  assert.equal(got['/own'][0].event.data.id, v.id);
  assert.equal(cli('webhook', 'disallow', '127.0.0.1').rc, 0);
});
