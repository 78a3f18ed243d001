// input_reference uploads and the content variants of h3pipe-api (issue #37 item 1) against a
// real local stack with the official openai SDK: an image stored under the input root as
// `h3pipe run` reads a referenceImage, refused when its bytes are no image (400 naming the field)
// or too large (413); a JSON body over --max-body-bytes still 413.  Run by ctest (api_media_e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, defaultConfig, call, until } from './stack.mjs';

let OpenAI, toFile;
try {
  ({ default: OpenAI, toFile } = await import('openai'));
} catch (e) {
  console.log(`skipped: the openai npm SDK is not installed in tests/api (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}

const stack = new Stack('h3media-', defaultConfig('api-media'));
let base, alice, rita, sdk;
before(() => {
  stack.start();
  base = stack.base;
  ({ alice, rita } = stack.tokens(['alice', 'rita']));
  sdk = new OpenAI({ apiKey: alice, baseURL: base, maxRetries: 0 });
});
after(() => stack.stop());

// A 1x1 PNG, a JPEG's and a WebP's first bytes.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==', 'base64');

const completed = (id) => until(`video ${id} completed`, async () => {
  const v = await sdk.videos.retrieve(id);
  assert.ok(['queued', 'in_progress', 'completed'].includes(v.status), JSON.stringify(v));
  return v.status === 'completed' && v;
});

test('input_reference: the image is stored under the input root and the job completes', async () => {
  const v = await sdk.videos.create({ prompt: 'a fox from this picture', size: '256x256', seconds: '1',
    input_reference: await toFile(PNG, '../../etc/evil name.png', { type: 'image/png' }) });
  assert.equal(v.object, 'video');
  // Named by the video id, never by the client's file name.
  const stored = path.join(stack.dir, 'inputs', 'api-uploads', v.id, 'reference.png');
  assert.deepEqual(fs.readFileSync(stored), PNG);
  assert.ok(!fs.existsSync(path.join(stack.dir, 'etc')));
  await completed(v.id);
});

test('input_reference that is not an image: 400 naming the field, nothing stored', async () => {
  const before = fs.existsSync(path.join(stack.dir, 'inputs', 'api-uploads'))
    ? fs.readdirSync(path.join(stack.dir, 'inputs', 'api-uploads')).length : 0;
  await assert.rejects(
    sdk.videos.create({ prompt: 'x', input_reference: await toFile(Buffer.from('GIF89a not allowed'), 'a.png', { type: 'image/png' }) }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input_reference' &&
      /input_reference: expected a PNG, JPEG or WebP image/.test(e.message));
  // A refused spec (a bad size) removes the upload it had stored.
  await assert.rejects(
    sdk.videos.create({ prompt: 'x', size: '12x', input_reference: await toFile(PNG, 'r.png') }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'size');
  const after = fs.existsSync(path.join(stack.dir, 'inputs', 'api-uploads'))
    ? fs.readdirSync(path.join(stack.dir, 'inputs', 'api-uploads')).length : 0;
  assert.equal(after, before);
  // Another file field is refused by name.
  const form = new FormData();
  form.append('prompt', 'x');
  form.append('mask', new Blob([PNG]), 'm.png');
  const r = await call(base, alice, 'POST', '/videos', form);
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'mask');
});

test('too large: an upload over --max-upload-bytes and a JSON body over --max-body-bytes get 413', async () => {
  // curl (Expect: 100-continue, as it sends a large body): refused from the head, before the
  // 33 MiB are sent.
  const big = Buffer.alloc(33 * 1024 * 1024, 0);
  PNG.copy(big);
  const file = path.join(stack.dir, 'big.png');
  fs.writeFileSync(file, big);
  const c = spawnSync('curl', ['-sS', '-H', `Authorization: Bearer ${alice}`, '-F', 'prompt=x', '-F', `input_reference=@${file}`,
    '-w', '\n%{http_code}', `${base}/videos`], { encoding: 'utf8' });
  const [body, code] = [c.stdout.slice(0, c.stdout.lastIndexOf('\n')), c.stdout.slice(c.stdout.lastIndexOf('\n') + 1)];
  assert.equal(code, '413', c.stdout + c.stderr);
  const err = JSON.parse(body).error;
  assert.equal(err.code, 'body_too_large');
  assert.equal(err.param, 'input_reference');
  assert.match(err.message, /larger than 33554432 bytes/);
  // Under the upload limit but over the body limit: fine as an upload...
  const mid = Buffer.alloc(2 * 1024 * 1024, 0);
  PNG.copy(mid);
  const ok = await sdk.videos.create({ prompt: 'a big reference', seconds: '1', input_reference: await toFile(mid, 'mid.png') });
  assert.ok(['queued', 'in_progress', 'completed'].includes(ok.status));
  // ...and 413 as JSON (or any other route).
  const json = await call(base, alice, 'POST', '/videos', { prompt: 'x'.repeat(2 * 1024 * 1024) });
  assert.equal(json.status, 413);
  const runs = await call(base, alice, 'POST', '/runs', 'x'.repeat(2 * 1024 * 1024));
  assert.equal(runs.status, 413);
  await assert.rejects(sdk.videos.create({ prompt: 'x'.repeat(2 * 1024 * 1024) }), (e) => e.status === 413);
});

function probe(file) {
  const r = spawnSync('ffprobe', ['-v', 'error', '-show_entries', 'stream=codec_name,width,height', '-of', 'json', file],
    { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout).streams[0];
}

test('content?variant=thumbnail|spritesheet: JPEGs of the frames, cached beside the MP4, gone with DELETE', async () => {
  const v = await sdk.videos.create({ prompt: 'a heron at dawn', size: '256x192', seconds: '2' });
  await assert.rejects(sdk.videos.downloadContent(v.id, { variant: 'thumbnail' }),
    (e) => e.status === 404 && /once it is completed/.test(e.message));
  await completed(v.id);
  const thumb = await sdk.videos.downloadContent(v.id, { variant: 'thumbnail' });
  assert.equal(thumb.headers.get('content-type'), 'image/jpeg');
  const jpg = Buffer.from(await thumb.arrayBuffer());
  assert.deepEqual([...jpg.subarray(0, 3)], [0xff, 0xd8, 0xff]);
  const tf = path.join(stack.dir, 'thumb.jpg');
  fs.writeFileSync(tf, jpg);
  assert.deepEqual(probe(tf), { codec_name: 'mjpeg', width: 256, height: 192 });
  // 49 frames: 10 of them, 5 a row, 160 pixels wide at the video's aspect.
  const sheet = Buffer.from(await (await sdk.videos.downloadContent(v.id, { variant: 'spritesheet' })).arrayBuffer());
  const sf = path.join(stack.dir, 'sheet.jpg');
  fs.writeFileSync(sf, sheet);
  assert.deepEqual(probe(sf), { codec_name: 'mjpeg', width: 800, height: 240 });
  // Cached beside the MP4 and served from there.
  const mp4 = JSON.parse(stack.cli('status', v.run_id, '--json').out).jobs[0].mp4;
  const cached = mp4.replace(/\.mp4$/, '.thumbnail.jpg');
  assert.deepEqual(fs.readFileSync(cached), jpg);
  const mtime = fs.statSync(cached).mtimeMs;
  const again = Buffer.from(await (await sdk.videos.downloadContent(v.id, { variant: 'thumbnail' })).arrayBuffer());
  assert.deepEqual(again, jpg);
  assert.equal(fs.statSync(cached).mtimeMs, mtime, 'made once');
  assert.ok(fs.existsSync(mp4.replace(/\.mp4$/, '.spritesheet.jpg')));
  const bad = await call(base, rita, 'GET', `/videos/${v.id}/content?variant=gif`);
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'variant');
  await sdk.videos.delete(v.id);
  assert.ok(!fs.existsSync(cached));
  assert.ok(!fs.existsSync(mp4.replace(/\.mp4$/, '.spritesheet.jpg')));
});
