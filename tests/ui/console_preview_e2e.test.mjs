// The console's preview (#38 item 6) in a real browser: a stack whose stages run the builtin
// model (CPU), which publishes a small JPEG preview every quarter of the sampling steps as a
// `preview` event; the job page, opened as the video is submitted, shows it while the job
// samples, then the MP4 once done.  Screenshot: $H3PIPE_TEST_OUT/job-preview.png.  Exits 77
// (skipped) without playwright-core, chromium or the bundle.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Stack, bin, fixed } from '../api/stack.mjs';

const skip = (why) => {
  console.log(`skipped: ${why}`);
  process.exit(77);
};
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  skip(`playwright-core is not installed in tests/ui (${e.message}); run scripts/setup.sh`);
}
const browserPath = process.env.H3PIPE_CHROMIUM ?? '/usr/bin/chromium';
if (!fs.existsSync(browserPath)) skip(`no chromium at ${browserPath} (apt-get install chromium)`);
const uiDir = process.env.H3PIPE_UI_DIR ?? path.join(bin, '..', 'ui');
if (!fs.existsSync(path.join(uiDir, 'app.js'))) skip(`the console is not built in ${uiDir} (target h3pipe-ui)`);
const out = process.env.H3PIPE_TEST_OUT ?? path.join(os.tmpdir(), 'h3pipe-console-out');
fs.mkdirSync(out, { recursive: true });

const builtin = { runtime: { name: 'builtin', settings: {} } };
const stack = new Stack('h3uip-', {
  name: 'console-preview',
  queue: { lease_ms: 3000, renew_ms: 500, sweep_ms: 200, max_deliveries: 3, block_ms: 50 },
  stages: { encode: builtin, sample: builtin, decode: builtin },
  classes: [{ name: 'pv', width: 256, height: 256, frames: 17, steps: 24 }],
  hosts: [{ name: 'local' }],
  pools: [
    { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.2) } },
    { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(5) } },
    { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(1) } },
  ],
});

let origin, tok, browser;
before(async () => {
  stack.start();
  tok = stack.token('root', 'admin');
  origin = stack.origin;
  browser = await chromium.launch({ executablePath: browserPath, headless: true, args: ['--no-sandbox'] });
});
after(async () => {
  if (browser) await browser.close();
  stack.stop();
});

test('the job page shows the latest preview while the job samples, then the MP4', async () => {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await ctx.addInitScript((t) => sessionStorage.setItem('h3pipe.token', t), tok);
  const page = await ctx.newPage();
  const res = await fetch(`${origin}/v1/videos`, {
    method: 'POST', headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'a preview of a fox', model: 'pv' }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  const v = await res.json();
  await page.goto(`${origin}/ui/jobs/${v.id}`);
  const img = page.getByTestId('preview');
  await img.waitFor({ timeout: 30000 });
  // Seen while the job samples, and a real JPEG the browser decoded.
  assert.equal(await page.getByTestId('job-state').textContent(), 'sample');
  const size = await img.evaluate(async (el) => {
    await el.decode();
    return [el.naturalWidth, el.naturalHeight];
  });
  assert.ok(size[0] > 0 && size[1] > 0, JSON.stringify(size));
  await page.screenshot({ path: path.join(out, 'job-preview.png') });
  await page.getByTestId('video').waitFor({ timeout: 60000 });
  assert.equal(await img.count(), 0);  // kept only while the job runs
  await ctx.close();
});
