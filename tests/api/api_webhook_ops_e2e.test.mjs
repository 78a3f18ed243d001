// Webhook operations of h3pipe-api (issue #37 item 6) against a real local stack (`h3pipe start`):
//   * https endpoints verified against the CA the operator names (H3PIPE_WEBHOOK_CA_FILE, here a
//     self-signed certificate the test makes with openssl): a receiver with that certificate gets
//     its deliveries (checked with the openai SDK's webhooks.unwrap()), one with another
//     self-signed certificate gets none (dead-lettered, the TLS failure named);
//   * `h3pipe webhook redeliver ID` and `--all-dead` put dead letters back with the same
//     webhook-id; bad input refused naming what was expected;
//   * consumers of the "webhooks" group whose replica is gone (here: "ghosts" that read an event
//     and never acknowledged it) lose their pending event to a live API (XAUTOCLAIM, delivered)
//     and are then removed from the group; the live API's consumer stays.
// Run by ctest (api_webhook_ops_e2e); exits 77 when the SDK or openssl is missing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import https from 'node:https';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Stack, bin, defaultConfig, until } from './stack.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  console.log(`skipped: the openai npm SDK is not installed in tests/api (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}
if (spawnSync('openssl', ['version']).status !== 0) {
  console.log('skipped: no openssl binary to make the test certificates');
  process.exit(77);
}

// Two self-signed certificates for 127.0.0.1: "trusted" is the CA file the API is given.
const certDir = fs.mkdtempSync(path.join(os.tmpdir(), 'h3hookca-'));
function selfSigned(name) {
  const key = path.join(certDir, `${name}.key`);
  const cert = path.join(certDir, `${name}.pem`);
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
    '-days', '1', '-subj', `/CN=h3pipe test ${name}`, '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'],
  { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return { key: fs.readFileSync(key), cert: fs.readFileSync(cert), certFile: cert };
}
const trusted = selfSigned('trusted');
const untrusted = selfSigned('untrusted');

process.env.H3PIPE_WEBHOOK_RETRY_MS = '200';
process.env.H3PIPE_WEBHOOK_TIMEOUT_MS = '2000';
process.env.H3PIPE_WEBHOOK_GIVE_UP_MS = '1500';
process.env.H3PIPE_WEBHOOK_CLAIM_IDLE_MS = '1500';
process.env.H3PIPE_WEBHOOK_PRUNE_MS = '2500';
process.env.H3PIPE_WEBHOOK_CA_FILE = trusted.certFile;
const stack = new Stack('h3hookops-', defaultConfig('api-webhook-ops-e2e'));

const sdk = new OpenAI({ apiKey: 'unused', baseURL: 'http://127.0.0.1:9/v1' });
const secrets = {};  // path -> whsec_
const got = {};      // path -> [{id, event, error}]
const answer = {};   // path -> status
function handler(req, res) {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', async () => {
    let event, error;
    try {
      event = await sdk.webhooks.unwrap(body, req.headers, secrets[req.url]);
    } catch (e) {
      error = e.message;
    }
    (got[req.url] ??= []).push({ id: req.headers['webhook-id'], event, error });
    res.writeHead(answer[req.url] ?? 200).end();
  });
}
const plain = http.createServer(handler);
const tls = https.createServer({ key: trusted.key, cert: trusted.cert }, handler);
const rogue = https.createServer({ key: untrusted.key, cert: untrusted.cert }, handler);
const servers = [plain, tls, rogue];
const urlOf = (srv, scheme, p) => `${scheme}://127.0.0.1:${srv.address().port}${p}`;

function add(url) {
  const r = stack.cli('webhook', 'add', url);
  assert.equal(r.rc, 0, r.err);
  secrets[new URL(url).pathname] = r.out.trim().split('\n').pop();
  return r.err.match(/endpoint (we_[0-9a-f]+)/)[1];
}
// A terminal event as the producers write it (docs/events.md), for a run with no video record.
const terminal = (run, type = 'video.completed') =>
  stack.redis('XADD', 'h3pipe:events', 'MAXLEN', '~', '100000', '*', 'type', type, 'job', 'video', 'run', run,
    'ts_ms', String(Date.now()));
const deadIds = () => stack.cli('webhook', 'list').out.split('\n').filter((l) => l.startsWith('dead\t')).map((l) => l.split('\t')[1]);

before(async () => {
  stack.start();
  for (const s of servers) await new Promise((r) => s.listen(0, '127.0.0.1', r));
});
after(() => {
  for (const s of servers) s.close();
  stack.stop();
  fs.rmSync(certDir, { recursive: true, force: true });
});

test('https: delivered to a receiver whose certificate is in the operator\'s CA file, never to another', async () => {
  const good = add(urlOf(tls, 'https', '/tls'));
  const bad = add(urlOf(rogue, 'https', '/rogue'));
  const e = terminal('r-tls-1');
  await until('the https delivery', () => got['/tls']?.length >= 1, 20000);
  assert.equal(got['/tls'][0].error, undefined, got['/tls'][0].error);
  assert.equal(got['/tls'][0].id, `msg_${e}_${good}`);
  assert.equal(got['/tls'][0].event.type, 'video.completed');
  // The rogue certificate is refused before anything is sent: dead-lettered, the TLS check named.
  const line = await until('the rogue one dead-lettered', () =>
    stack.cli('webhook', 'list').out.split('\n').find((l) => l.startsWith(`dead\tmsg_${e}_${bad}\t`)), 20000);
  assert.match(line.split('\t').pop(), /SSL/i, line);
  assert.equal(got['/rogue'], undefined);
  assert.equal(stack.cli('webhook', 'remove', good).rc, 0);
  assert.equal(stack.cli('webhook', 'remove', bad).rc, 0);
  // A CA file that holds no certificate stops the API at start, naming the setting.
  const api = spawnSync(path.join(bin, 'h3pipe-api'),
    ['--config', stack.config, '--port', '0', '--webhook-ca-file', path.join(certDir, 'trusted.key')], { encoding: 'utf8', timeout: 10000 });
  assert.equal(api.status, 2, api.stderr);
  assert.match(api.stderr, /--webhook-ca-file \/ H3PIPE_WEBHOOK_CA_FILE: expected a readable PEM file of CA certificates/);
});

test('webhook redeliver ID and --all-dead: dead letters sent again with the same webhook-id', async () => {
  answer['/down'] = 503;
  const ep = add(urlOf(plain, 'http', '/down'));
  const entries = ['r-dead-1', 'r-dead-2', 'r-dead-3'].map((run) => terminal(run));
  const ids = entries.map((e) => `msg_${e}_${ep}`);
  await until('three dead letters', () => ids.every((id) => deadIds().includes(id)), 20000);
  const before = got['/down'].length;
  answer['/down'] = 200;
  // Bad input: neither or both, an id that is not dead.
  const none = stack.cli('webhook', 'redeliver');
  assert.equal(none.rc, 2);
  assert.match(none.err, /expected dead-lettered delivery ids \(msg_\.\.\., from `h3pipe webhook list`\) or --all-dead, not neither/);
  assert.equal(stack.cli('webhook', 'redeliver', ids[0], '--all-dead').rc, 2);
  const unknown = stack.cli('webhook', 'redeliver', ids[0], 'msg_0-0_we_nope');
  assert.equal(unknown.rc, 2);
  assert.match(unknown.err, /ID: "msg_0-0_we_nope" is not a dead-lettered delivery/);
  assert.ok(deadIds().includes(ids[0]), 'a refused redeliver moved something');
  // One by id.
  const one = stack.cli('webhook', 'redeliver', ids[0]);
  assert.equal(one.rc, 0, one.err);
  assert.match(one.err, /re-queued 1 dead-lettered webhook delivery/);
  await until('the first redelivered', () => got['/down'].slice(before).some((x) => x.id === ids[0]), 20000);
  assert.ok(!deadIds().includes(ids[0]));
  // The rest at once.
  const all = stack.cli('webhook', 'redeliver', '--all-dead');
  assert.equal(all.rc, 0, all.err);
  await until('the others redelivered', () => ids.slice(1).every((id) => got['/down'].slice(before).some((x) => x.id === id)), 20000);
  const again = got['/down'].slice(before);
  assert.deepEqual(again.map((x) => x.error), again.map(() => undefined));
  assert.deepEqual([...new Set(again.map((x) => x.id))].sort(), [...ids].sort());
  await until('nothing pending, nothing dead', () => /^pending\t0$/m.test(stack.cli('webhook', 'list').out) && deadIds().length === 0, 20000);
  assert.equal(stack.cli('webhook', 'remove', ep).rc, 0);
});

test('a gone replica\'s unacknowledged event is claimed and delivered by the live API, then its consumer is pruned', async () => {
  const ep = add(urlOf(plain, 'http', '/ghost'));
  // "ghost-1" reads the event in the same transaction as its XADD (before the live API's blocked
  // read is served) and never acknowledges it; "ghost-2" joined and read nothing: both are gone.
  const ghostRead = (consumer, run) => {
    const cmds = ['MULTI', `XADD h3pipe:events * type video.completed job video run ${run} ts_ms ${Date.now()}`,
      `XREADGROUP GROUP webhooks ${consumer} COUNT 10 STREAMS h3pipe:events >`, 'EXEC'];
    const st = JSON.parse(fs.readFileSync(path.join(stack.dir, 'stack.json'), 'utf8'));
    const pw = fs.readFileSync(path.join(stack.dir, 'secrets', 'redis-admin.password'), 'utf8').trim();
    const r = spawnSync('redis-cli', ['-s', st.redis.host, '--user', 'redis-admin', '--pass', pw, '--no-auth-warning'],
      { input: cmds.join('\n') + '\n', encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  const out = ghostRead('ghost-1', 'r-ghost-1');
  const entry = out.match(/^(\d+-\d+)$/m)[1];
  stack.redis('XGROUP', 'CREATECONSUMER', 'h3pipe:events', 'webhooks', 'ghost-2');
  const consumers = () => {
    const lines = stack.redis('XINFO', 'CONSUMERS', 'h3pipe:events', 'webhooks').split('\n');
    return lines.flatMap((l, i) => (l === 'name' ? [lines[i + 1]] : []));
  };
  const pending = Number(stack.redis('XPENDING', 'h3pipe:events', 'webhooks').split('\n')[0]);
  assert.ok(pending >= 1, `pending ${pending}`);
  assert.ok(consumers().includes('ghost-1') && consumers().includes('ghost-2'), `${consumers()}\n${out}`);
  // Claimed after 1.5 s idle and delivered once, with the id every replica would give it.
  await until('the ghost\'s event delivered', () => got['/ghost']?.length >= 1, 20000);
  assert.equal(got['/ghost'][0].id, `msg_${entry}_${ep}`);
  assert.equal(got['/ghost'][0].error, undefined, got['/ghost'][0].error);
  // Both ghosts pruned (idle 2.5 s, nothing pending); the live API's consumer kept.
  const apiPid = JSON.parse(fs.readFileSync(path.join(stack.dir, 'run', 'api-local.json'), 'utf8')).pid;
  await until('the ghosts pruned', () => !consumers().some((c) => c.startsWith('ghost-')), 20000);
  assert.ok(consumers().some((c) => c.endsWith(`-${apiPid}`)), consumers().join(','));
  assert.equal(Number(stack.redis('XPENDING', 'h3pipe:events', 'webhooks').split('\n')[0]), 0);
  const logs = fs.readFileSync(path.join(stack.dir, 'logs', 'api-local.log'), 'utf8');
  assert.match(logs, /consumer ghost-1 idle \d+ s with nothing pending \(its replica is gone\); removed from group webhooks/);
  await new Promise((r) => setTimeout(r, 500));
  assert.equal(got['/ghost'].length, 1);
  assert.equal(stack.cli('webhook', 'remove', ep).rc, 0);
});
