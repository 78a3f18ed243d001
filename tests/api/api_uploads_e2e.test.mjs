// input_reference streamed to disk (issue #37, "uploads are bounded and streamed to disk";
// common/api/upload_stream.h) against a real local stack and an h3pipe-api of the test's own with
// --max-upload-bytes 80 MB: a 64 MiB upload arrives byte for byte (SHA-256) while the API's peak
// RSS (VmHWM) grows far less than the upload; the upload is on disk as a temporary while it is
// still arriving; past the limit a chunked upload (no Content-Length: only the streaming count can
// stop it) gets 413 naming input_reference, and a client gone mid-body, leave no file behind.
// Run by ctest (api_uploads_e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { Stack, bin, defaultConfig, until } from './stack.mjs';

const LIMIT = 80_000_000;
const stack = new Stack('h3upload-', defaultConfig('api-uploads'));
let api, base, port, alice;
before(async () => {
  stack.start();
  ({ alice } = stack.tokens(['alice']));
  const portFile = path.join(stack.dir, 'upload-api.port');
  api = spawn(path.join(bin, 'h3pipe-api'), ['--config', stack.config, '--state-dir', stack.dir, '--port', '0',
    '--port-file', portFile, '--max-upload-bytes', String(LIMIT)], { stdio: ['ignore', 'inherit', 'inherit'] });
  port = Number(await until('the API port file', () => fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim()));
  base = `http://127.0.0.1:${port}/v1`;
});
after(() => {
  api?.kill('SIGTERM');
  stack.stop();
});

const uploads = () => path.join(stack.dir, 'inputs', 'api-uploads');
// Every file below api-uploads (the stored references, their sidecars, temporaries).
function filesBelow(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true }).map((f) => path.join(dir, f)).filter((f) => fs.statSync(f).isFile());
}
const parts = () => filesBelow(uploads()).filter((f) => f.endsWith('.part'));
const hwmKiB = () => Number(/VmHWM:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${api.pid}/status`, 'utf8'))[1]);

// `size` bytes that start as a PNG does, the rest random.
function png(size) {
  const b = crypto.randomBytes(size);
  Buffer.from('89504e470d0a1a0a', 'hex').copy(b);
  return b;
}

// A multipart body around `file` (input_reference) with a prompt field.
function multipart(file) {
  const boundary = `h3pipe${crypto.randomBytes(8).toString('hex')}`;
  const head = Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="prompt"\r\n\r\na fox\r\n` +
    `--${boundary}\r\nContent-Disposition: form-data; name="input_reference"; filename="r.png"\r\n` +
    'Content-Type: image/png\r\n\r\n');
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  return { boundary, head, tail, length: head.length + file.length + tail.length };
}

// POST /v1/videos by hand: `chunked` sends no Content-Length; `stopAfter` bytes of the file are
// sent and then the socket is destroyed (after `beforeStop` resolves).  The status and JSON body,
// or { aborted: true }.
function post(file, { chunked = false, stopAfter, beforeStop } = {}) {
  const m = multipart(file);
  return new Promise((resolve, reject) => {
    const headers = { Authorization: `Bearer ${alice}`, 'Content-Type': `multipart/form-data; boundary=${m.boundary}` };
    if (!chunked) headers['Content-Length'] = String(m.length);
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/videos', method: 'POST', headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text) }));
    });
    req.on('error', (e) => (stopAfter !== undefined ? resolve({ aborted: true }) : reject(e)));
    req.write(m.head);
    const body = stopAfter === undefined ? file : file.subarray(0, stopAfter);
    const step = 1 << 20;
    let at = 0;
    const pump = () => {
      while (at < body.length) {
        const ok = req.write(body.subarray(at, at + step));
        at += step;
        if (!ok) return req.once('drain', pump);
      }
      if (stopAfter === undefined) return req.end(m.tail);
      Promise.resolve(beforeStop?.()).then(() => { req.destroy(); resolve({ aborted: true }); }, reject);
    };
    pump();
  });
}

test('a 64 MiB input_reference arrives byte for byte, streamed: the API holds far less than the upload', async () => {
  const file = png(64 << 20);
  const hwmBefore = hwmKiB();
  const r = await post(file);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const stored = path.join(uploads(), r.json.id, 'reference.png');
  const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
  assert.equal(sha(fs.readFileSync(stored)), sha(file));
  assert.equal(fs.statSync(stored).mode & 0o777, 0o600);
  assert.deepEqual(parts(), []);
  const grewMiB = (hwmKiB() - hwmBefore) / 1024;
  console.log(`64 MiB upload: API peak RSS (VmHWM) grew ${grewMiB.toFixed(1)} MiB`);
  assert.ok(grewMiB < 24, `the API's peak RSS grew ${grewMiB.toFixed(1)} MiB for a 64 MiB upload`);
});

test('an upload on its way is a temporary on disk; a client gone mid-body leaves nothing', async () => {
  const file = png(32 << 20);
  const before = filesBelow(uploads()).length;
  const r = await post(file, {
    stopAfter: 8 << 20,
    // Written as it arrives: the temporary holds bytes before the body is whole.
    beforeStop: () => until('the upload temporary on disk', () => parts().some((p) => fs.statSync(p).size > (1 << 20))),
  });
  assert.ok(r.aborted);
  await until('the temporary removed', () => parts().length === 0, 10000);
  assert.equal(filesBelow(uploads()).length, before);
});

test('past --max-upload-bytes while streaming (chunked, no Content-Length): 413 naming input_reference, no file left', async () => {
  const before = filesBelow(uploads()).length;
  const r = await post(png(LIMIT + (4 << 20)), { chunked: true });
  assert.equal(r.status, 413, JSON.stringify(r.json));
  assert.equal(r.json.error.param, 'input_reference');
  assert.equal(r.json.error.code, 'body_too_large');
  assert.match(r.json.error.message, new RegExp(`larger than ${LIMIT} bytes`));
  assert.deepEqual(parts(), []);
  assert.equal(filesBelow(uploads()).length, before);
});

// curl sends `Expect: 100-continue` before a body over 1 MiB and waits for the interim answer
// before it sends the body: the API answers it at once (here curl would wait 10 s without it).
test('Expect: 100-continue (curl, 4 MiB): the interim answer comes at once, the upload is stored', () => {
  const file = path.join(stack.dir, 'expect.png');
  fs.writeFileSync(file, png(4 << 20));
  const t0 = Date.now();
  const r = spawnSync('curl', ['-sS', '--expect100-timeout', '10', '-H', 'Expect: 100-continue',
    '-H', `Authorization: Bearer ${alice}`, '-F', 'prompt=a fox', '-F', `input_reference=@${file};type=image/png`,
    '-w', '\n%{http_code}', `${base}/videos`], { encoding: 'utf8' });
  const seconds = (Date.now() - t0) / 1000;
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split('\n');
  assert.equal(lines.at(-1), '200', r.stdout);
  const id = JSON.parse(lines.slice(0, -1).join('\n')).id;
  assert.ok(fs.existsSync(path.join(uploads(), id, 'reference.png')));
  assert.ok(seconds < 5, `the upload took ${seconds.toFixed(2)} s: the 100 Continue was held`);
});
