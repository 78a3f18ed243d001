// h3pipe-api's own certificate (issue #37 item 8, "TLS by the ingress or the service's own
// certificate"; common/api/tls_front.h, docs/api.md "TLS"): a self-signed certificate made here
// with openssl; a key readable by others is refused (exit 2 naming the file); then the API serves
// HTTPS that Node's https, curl --cacert and the official openai SDK (NODE_EXTRA_CA_CERTS) speak:
// models, a video created, completed and its MP4 downloaded through the TLS relay; plain HTTP to
// the port gets no answer.  Run by ctest (api_tls_e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Stack, bin, defaultConfig, until } from './stack.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
if (!fs.existsSync(path.join(here, 'node_modules', 'openai'))) {
  console.log('skipped: the openai npm SDK is not installed in tests/api; run scripts/setup.sh');
  process.exit(77);
}

const stack = new Stack('h3tls-', defaultConfig('api-tls'));
let api, port, alice, cert, key;
before(() => {
  stack.start();
  ({ alice } = stack.tokens(['alice']));
  cert = path.join(stack.dir, 'api-cert.pem');
  key = path.join(stack.dir, 'api-key.pem');
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
  { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
});
after(() => {
  api?.kill('SIGTERM');
  stack.stop();
});

const apiArgs = (portFile) => ['--config', stack.config, '--state-dir', stack.dir, '--port', '0', '--port-file', portFile,
  '--tls-cert', cert, '--tls-key', key];

test('a TLS key readable by others is refused, naming the file', () => {
  fs.chmodSync(key, 0o644);
  const r = spawnSync(path.join(bin, 'h3pipe-api'), apiArgs(path.join(stack.dir, 'never.port')), { encoding: 'utf8', timeout: 20000 });
  assert.equal(r.status, 2, r.stderr);
  assert.ok(r.stderr.includes(`--tls-key ${key}`), r.stderr);
  assert.match(r.stderr, /mode 0644.*expected mode 0600 or 0400/);
  // Only one of the pair: refused too.
  const half = spawnSync(path.join(bin, 'h3pipe-api'), ['--config', stack.config, '--port', '0', '--tls-cert', cert],
    { encoding: 'utf8', timeout: 20000 });
  assert.equal(half.status, 2, half.stderr);
  assert.match(half.stderr, /--tls-cert and --tls-key go together/);
});

test('HTTPS with the service certificate: https, curl --cacert and the openai SDK; plain HTTP fails', async () => {
  fs.chmodSync(key, 0o600);
  const portFile = path.join(stack.dir, 'tls-api.port');
  api = spawn(path.join(bin, 'h3pipe-api'), apiArgs(portFile), { stdio: ['ignore', 'inherit', 'inherit'] });
  port = Number(await until('the API port file', () => fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim()));
  const base = `https://127.0.0.1:${port}/v1`;

  // Node's https with the certificate as its CA.
  const body = await new Promise((resolve, reject) => {
    https.get(`${base}/models`, { ca: fs.readFileSync(cert), headers: { Authorization: `Bearer ${alice}` } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    }).on('error', reject);
  });
  assert.equal(body.status, 200, body.text);
  assert.equal(JSON.parse(body.text).object, 'list');

  // curl: verified against the CA; without it, refused.
  const ok = spawnSync('curl', ['-sS', '--cacert', cert, '-H', `Authorization: Bearer ${alice}`, `${base}/models`], { encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
  assert.equal(JSON.parse(ok.stdout).object, 'list');
  const untrusted = spawnSync('curl', ['-sS', `${base}/models`], { encoding: 'utf8' });
  assert.notEqual(untrusted.status, 0);

  // The official SDK, trusting the certificate through NODE_EXTRA_CA_CERTS: a video end to end,
  // its MP4 downloaded over TLS.
  const script = `
    import OpenAI from 'openai';
    const sdk = new OpenAI({ apiKey: process.env.TOKEN, baseURL: process.env.BASE, maxRetries: 0 });
    const models = await sdk.models.list();
    let v = await sdk.videos.create({ prompt: 'a lighthouse over TLS', size: '256x192', seconds: '2' });
    for (let i = 0; i < 600 && v.status !== 'completed'; i++) {
      if (v.status === 'failed') throw new Error(JSON.stringify(v));
      await new Promise((r) => setTimeout(r, 100));
      v = await sdk.videos.retrieve(v.id);
    }
    const mp4 = Buffer.from(await (await sdk.videos.downloadContent(v.id)).arrayBuffer());
    console.log(JSON.stringify({ models: models.data.length, status: v.status, bytes: mp4.length,
      ftyp: mp4.subarray(4, 8).toString() }));`;
  const sdk = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
    cwd: here, encoding: 'utf8', timeout: 120000,
    env: { ...process.env, NODE_EXTRA_CA_CERTS: cert, TOKEN: alice, BASE: base },
  });
  assert.equal(sdk.status, 0, sdk.stderr);
  const out = JSON.parse(sdk.stdout.trim().split('\n').pop());
  assert.equal(out.status, 'completed');
  assert.ok(out.models >= 1);
  assert.equal(out.ftyp, 'ftyp');
  assert.ok(out.bytes > 1000, `MP4 of ${out.bytes} bytes`);

  // Plain HTTP to the TLS port: no HTTP answer.
  await assert.rejects(fetch(`http://127.0.0.1:${port}/v1/models`, { headers: { Authorization: `Bearer ${alice}` } }));
});
