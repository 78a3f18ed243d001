// TLS from the config (issue #37 item 8; docs/api.md, "TLS"): a host's api_tls_cert and
// api_tls_key, a self-signed certificate made here with openssl for the name api.example (and
// 127.0.0.1).  A key readable by others: `h3pipe start` exits non-zero naming
// /hosts/0/api_tls_key and the file, and starts nothing.  With the key 0600: `start` runs
// h3pipe-api with --tls-cert/--tls-key, probes its /readyz over HTTPS (trusting that certificate,
// checked against the name api.example it gives) and prints its https URL; the run file,
// `status --json` and `h3pipe wait` agree; curl --cacert gets 200 from /readyz, a video created
// over HTTPS completes; plain HTTP to the port gets no HTTP answer; `h3pipe stop` ends the API.
// Run by ctest (api_tls_start_e2e).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, defaultConfig, until } from './stack.mjs';

const stack = new Stack('h3tlscfg-', defaultConfig('api-tls-config'));
const cert = path.join(stack.dir, 'api-cert.pem');
const key = path.join(stack.dir, 'api-key.pem');
{
  const r = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=api.example',
    '-addext', 'subjectAltName=DNS:api.example,IP:127.0.0.1'], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  // The config names the files relative to itself (resolved by the loader).
  const cfg = JSON.parse(fs.readFileSync(stack.config, 'utf8'));
  cfg.hosts = [{ name: 'local', api_tls_cert: 'api-cert.pem', api_tls_key: 'api-key.pem' }];
  fs.writeFileSync(stack.config, JSON.stringify(cfg));
}
let started = false;
after(() => {
  if (started) stack.stop();
});

// curl over HTTPS trusting only the certificate: { code, body }.
function curl(url, ...args) {
  const r = spawnSync('curl', ['-sS', '--cacert', cert, '-w', '\n%{http_code}', ...args, url], { encoding: 'utf8' });
  assert.equal(r.status, 0, `curl ${url}: ${r.stderr}`);
  const i = r.stdout.lastIndexOf('\n');
  return { code: Number(r.stdout.slice(i + 1)), body: r.stdout.slice(0, i) };
}

test('a key readable by others: start refuses it naming the field and the file, and starts nothing', () => {
  fs.chmodSync(key, 0o644);
  const r = stack.cli('start');
  started = r.rc === 0;  // stopped by after() should it have started after all
  assert.notEqual(r.rc, 0, r.out + r.err);
  assert.ok(r.err.includes(`/hosts/0/api_tls_key ${key}: the private key is readable by others (mode 0644); ` +
    'expected mode 0600 or 0400'), r.err);
  assert.ok(!fs.existsSync(path.join(stack.dir, 'stack.json')), 'nothing started');
  // Only one of the two: the loader refuses it, naming the field.
  const half = path.join(stack.dir, 'half.json');
  const cfg = JSON.parse(fs.readFileSync(stack.config, 'utf8'));
  cfg.hosts = [{ name: 'local', api_tls_cert: 'api-cert.pem' }];
  fs.writeFileSync(half, JSON.stringify(cfg));
  const h = spawnSync(path.join(process.env.H3PIPE_BIN ?? 'build/bin', 'h3pipe'), ['--config', half, 'start'], { encoding: 'utf8' });
  assert.notEqual(h.status, 0);
  assert.match(h.stderr, /\/hosts\/0\/api_tls_key: api_tls_cert and api_tls_key go together \(got only api_tls_cert\)/);
});

test('start serves the API over HTTPS with the configured certificate; stop ends it', async () => {
  fs.chmodSync(key, 0o600);
  const s = stack.cli('start');
  assert.equal(s.rc, 0, s.err + s.out);
  started = true;
  const run = stack.runFile();
  const url = `https://127.0.0.1:${run.health_port}/v1`;
  assert.equal(run.api_url, url);
  assert.ok(s.out.includes(url), s.out);
  const ps = fs.readFileSync(`/proc/${run.pid}/cmdline`, 'utf8').split('\0');
  assert.equal(ps[ps.indexOf('--tls-cert') + 1], cert);
  assert.equal(ps[ps.indexOf('--tls-key') + 1], key);

  // curl trusting the certificate: /readyz 200, by its address and by the name it gives.
  assert.deepEqual(curl(`https://127.0.0.1:${run.health_port}/readyz`), { code: 200, body: 'ready\n' });
  assert.equal(curl(`https://api.example:${run.health_port}/readyz`, '--resolve', `api.example:${run.health_port}:127.0.0.1`).code, 200);
  // Not trusting it: refused.
  assert.notEqual(spawnSync('curl', ['-sS', `https://127.0.0.1:${run.health_port}/readyz`]).status, 0);
  // Plain HTTP to the port: no HTTP answer.
  const plain = spawnSync('curl', ['-sS', '-m', '5', '-w', '%{http_code}', `http://127.0.0.1:${run.health_port}/readyz`], { encoding: 'utf8' });
  assert.notEqual(plain.status, 0, plain.stdout);

  // A video over HTTPS, to completion; status --json of its run gives the https URL, wait works.
  const tok = stack.token('alice', 'submit');
  const auth = ['-H', `Authorization: Bearer ${tok}`];
  const made = curl(`${url}/videos`, ...auth, '-H', 'Content-Type: application/json',
    '--data', JSON.stringify({ prompt: 'a lighthouse over configured TLS', size: '256x192', seconds: '2' }));
  assert.equal(made.code, 200, made.body);
  const video = JSON.parse(made.body);
  const done = await until('the video completed', () => {
    const v = JSON.parse(curl(`${url}/videos/${video.id}`, ...auth).body);
    assert.notEqual(v.status, 'failed', JSON.stringify(v));
    return v.status === 'completed' && v;
  }, 120000, 200);
  const w = stack.cli('wait', done.run_id);
  assert.equal(w.rc, 0, w.err + w.out);
  const st = stack.cli('status', done.run_id, '--json');
  assert.equal(st.rc, 0, st.err);
  assert.equal(JSON.parse(st.out).api_url, url);
  const mp4 = spawnSync('curl', ['-sS', '--cacert', cert, ...auth, `${url}/videos/${video.id}/content`], { maxBuffer: 1 << 26 });
  assert.equal(mp4.status, 0);
  assert.equal(mp4.stdout.subarray(4, 8).toString(), 'ftyp');

  // stop ends the API with the rest.
  const stop = stack.cli('stop');
  assert.equal(stop.rc, 0, stop.err);
  started = false;
  await until('the API gone', () => {
    try {
      process.kill(run.pid, 0);
      return false;
    } catch {
      return true;
    }
  }, 20000);
  fs.rmSync(stack.dir, { recursive: true, force: true });
});
