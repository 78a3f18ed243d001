// Upload temporaries after a kill -9 (issue #37, "Bad input"; common/api/upload_sweep.h;
// docs/api.md, "POST /v1/videos"): an h3pipe-api of the test's own beside a real local stack
// stores one upload whole, then gets a large chunked upload from curl --limit-rate and is killed
// -9 while that upload's temporary (reference.png.p<pid>-<hex>.part) is on disk.  The temporary
// is left (nothing else removes it).  Restarted, the API removes it once nothing has written it
// for the bound (the test dates it back instead of waiting a minute), and keeps: the completed
// upload and its sidecar, a fresh temporary of the same pattern (a live upload of a replica
// sharing the root), a file of another pattern, and what a symlink in api-uploads points to.
// Run by ctest (api_upload_sweep_e2e).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, bin, defaultConfig, until } from './stack.mjs';

const stack = new Stack('h3sweep-', defaultConfig('api-upload-sweep')).start();
const { alice } = stack.tokens(['alice']);
let api;
after(() => {
  api?.kill('SIGKILL');
  stack.stop();
});

const uploads = path.join(stack.dir, 'inputs', 'api-uploads');
function filesBelow(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true }).map((f) => path.join(dir, f))
    .filter((f) => fs.lstatSync(f).isFile());
}

// h3pipe-api on a free port; its port once listening.
async function startApi(tag) {
  const portFile = path.join(stack.dir, `sweep-${tag}.port`);
  const log = fs.openSync(path.join(stack.dir, `sweep-${tag}.log`), 'w');
  api = spawn(path.join(bin, 'h3pipe-api'), ['--config', stack.config, '--state-dir', stack.dir, '--port', '0',
    '--port-file', portFile], { stdio: ['ignore', log, log] });
  return Number(await until('the API port file', () => fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim()));
}

// `size` bytes that start as a PNG does.
function png(file, size) {
  const b = crypto.randomBytes(size);
  Buffer.from('89504e470d0a1a0a', 'hex').copy(b);
  fs.writeFileSync(file, b);
}

test('a kill -9 mid-upload leaves a temporary that the next start removes; the rest is kept', async () => {
  let port = await startApi('first');
  const small = path.join(stack.dir, 'small.png');
  png(small, 4096);
  const ok = spawnSync('curl', ['-sS', '-H', `Authorization: Bearer ${alice}`, '-F', 'prompt=kept',
    '-F', `input_reference=@${small};type=image/png`, `http://127.0.0.1:${port}/v1/videos`], { encoding: 'utf8' });
  assert.equal(ok.status, 0, ok.stderr);
  const kept = path.join(uploads, JSON.parse(ok.stdout).id, 'reference.png');
  assert.ok(fs.existsSync(kept) && fs.existsSync(`${kept}.sha256`), ok.stdout);

  // A large upload, chunked (no Content-Length) and slow, killed with the API mid-body.
  const big = path.join(stack.dir, 'big.png');
  png(big, 24 << 20);
  const slow = spawn('curl', ['-sS', '-H', `Authorization: Bearer ${alice}`, '-H', 'Transfer-Encoding: chunked',
    '--limit-rate', '2M', '-F', 'prompt=killed', '-F', `input_reference=@${big};type=image/png`,
    `http://127.0.0.1:${port}/v1/videos`], { stdio: 'ignore' });
  const part = await until('the upload temporary', () => {
    const p = filesBelow(uploads).find((f) => /reference\.png\.p\d+-[0-9a-f]{16}\.part$/.test(f));
    return p && fs.statSync(p).size > 0 && p;
  }, 30000, 50);
  api.kill('SIGKILL');
  await new Promise((r) => api.once('exit', r));
  slow.kill('SIGKILL');
  assert.ok(fs.existsSync(part), 'the kill -9 left the temporary');
  assert.match(path.basename(part), new RegExp(`\\.p${api.pid}-`), 'named by the killed API');

  // Beside it: a fresh temporary of the pattern (a replica's live upload), a file of another
  // pattern, and a symlink folder pointing outside (never followed).
  const liveDir = path.join(uploads, 'vid_live');
  fs.mkdirSync(liveDir);
  const live = path.join(liveDir, 'reference.jpg.p999999-0123456789abcdef.part');
  fs.writeFileSync(live, 'x');
  const other = path.join(path.dirname(part), 'notes.p1-0123456789abcdef.part');
  fs.writeFileSync(other, 'x');
  const outside = fs.mkdtempSync(path.join(stack.dir, 'outside-'));
  const bait = path.join(outside, 'reference.png.p1-0123456789abcdef.part');
  fs.writeFileSync(bait, 'x');
  fs.symlinkSync(outside, path.join(uploads, 'vid_link'));
  // Nothing has written them for ten minutes, but the live one.
  const old = new Date(Date.now() - 600_000);
  for (const f of [part, other, bait]) fs.utimesSync(f, old, old);

  port = await startApi('second');
  assert.ok(!fs.existsSync(part), 'the killed upload\'s temporary is gone');
  for (const f of [kept, `${kept}.sha256`, live, other, bait]) assert.ok(fs.existsSync(f), `${f} kept`);
  const log = fs.readFileSync(path.join(stack.dir, 'sweep-second.log'), 'utf8');
  assert.match(log, /removed 1 temporaries of interrupted uploads/);
  // Still serving.
  const r = await fetch(`http://127.0.0.1:${port}/v1/models`, { headers: { Authorization: `Bearer ${alice}` } });
  assert.equal(r.status, 200);
});
