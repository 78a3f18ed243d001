// Issue #37 "Done when", the chaos line: jobs submitted over HTTP to a real local stack
// (`h3pipe start`: private redis-server with AOF, the sim runtime writing real MP4s, h3pipe-api,
// all under the stack's supervisor) while the API and Redis are each killed (-9) twice, mid-run.
// A webhook receiver verifies every delivery with the official openai SDK's webhooks.unwrap() and
// answers 500 to the first attempt of every third webhook-id (so the outbox must redeliver).  The
// client retries each POST that got no answer or a 5xx with the same Idempotency-Key (the keyed
// two thirds); an unkeyed POST is sent once.  Passes when:
//   * every accepted video (and any video an unanswered POST made) completes with exactly one MP4
//     in its output folder, no stage output written twice, no .part left;
//   * every keyed request made exactly one video, also when posted again after the run;
//   * every completed video's video.completed webhook arrived verified, with one webhook-id on
//     every attempt, a 2xx given; the ids answered 500 came again; nothing pending or dead;
//   * each killed API came back as a new child of the stack's supervisor (not started by the test).
// Run by ctest (api_chaos_e2e); exits 77 when the SDK is not installed.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { Stack, defaultConfig, fixed, until } from './stack.mjs';

let OpenAI;
try {
  OpenAI = (await import('openai')).default;
} catch (e) {
  console.log(`skipped: the openai npm SDK is not installed in tests/api (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}

const JOBS = Number(process.env.H3PIPE_CHAOS_JOBS ?? 36);
const cfg = defaultConfig('api-chaos-e2e');
cfg.pools = [
  { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.05) } },
  { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(0.4) } },
  { name: 's1', host: 'local', stage: 'sample', profiles: { default: fixed(0.4) } },
  { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.05) } },
];
const stack = new Stack('h3chaos-', cfg);
// Short webhook retries (300 ms, doubling; 2 s per attempt; never dead within the test), and a
// killed API's read-but-unacknowledged terminal events taken over after 3 s (not 30 s).
process.env.H3PIPE_WEBHOOK_RETRY_MS = '300';
process.env.H3PIPE_WEBHOOK_TIMEOUT_MS = '2000';
process.env.H3PIPE_WEBHOOK_GIVE_UP_MS = '600000';
process.env.H3PIPE_WEBHOOK_CLAIM_IDLE_MS = '3000';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const readJson = (f) => JSON.parse(fs.readFileSync(f, 'utf8'));
const stackJson = () => readJson(path.join(stack.dir, 'stack.json'));
const apiRun = () => readJson(path.join(stack.dir, 'run', 'api-local.json'));
const ppid = (pid) => Number(fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')[1]);

// ---- the receiver: every delivery checked with the SDK --------------------------------------
const sdk = new OpenAI({ apiKey: 'unused', baseURL: 'http://127.0.0.1:9/v1' });
let secret;
const deliveries = [];  // {id, event, error, status}
const attempts = new Map();  // webhook-id -> attempts seen
const refusedOnce = new Set();  // ids answered 500 on their first attempt
const receiver = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', async () => {
    const id = req.headers['webhook-id'];
    let event, error;
    try {
      event = await sdk.webhooks.unwrap(body, req.headers, secret);
    } catch (e) {
      error = e.message;
    }
    const n = (attempts.get(id) ?? 0) + 1;
    attempts.set(id, n);
    // Every third new id is refused once (by the order ids first arrive): the outbox must retry.
    let status = 200;
    if (n === 1 && attempts.size % 3 === 0) {
      status = 500;
      refusedOnce.add(id);
    }
    deliveries.push({ id, event, error, status });
    // Answered after 150 ms, so some deliveries are in flight when the API is killed.
    setTimeout(() => res.writeHead(status).end(), 150);
  });
});

// ---- the client: POST with retries on no answer / 5xx, re-reading the API's port -------------
let tok;
async function post(body, key) {
  const headers = { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json' };
  if (key) headers['Idempotency-Key'] = key;
  const res = await fetch(`http://127.0.0.1:${apiRun().health_port}/v1/videos`, {
    method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(10000),
  });
  return { status: res.status, json: await res.json().catch(() => null) };
}
async function submit(i, keyed, log) {
  const body = { prompt: `chaos job ${i}`, size: '128x96', frames: 9 };
  const key = keyed ? `chaos-key-${i}` : undefined;
  for (let tries = 1; ; tries++) {
    let r;
    try {
      r = await post(body, key);
    } catch (e) {
      r = { status: 0, error: e.cause?.code ?? e.message };
    }
    log.push({ i, keyed, tries, status: r.status, error: r.error });
    if (r.status === 200) return { i, keyed, key, body, video: r.json, tries };
    assert.ok(r.status === 0 || r.status >= 500, `job ${i}: ${r.status} ${JSON.stringify(r.json)}`);
    if (!keyed) return { i, keyed, body, video: null, tries };  // may or may not have made one
    assert.ok(tries < 200, `job ${i}: no answer after ${tries} tries`);
    await sleep(100);
  }
}

after(() => {
  receiver.close();
  stack.stop();
});

test('kill -9 of the API and Redis (twice each) mid-run: one MP4 per job, webhooks at least once with one id, no key makes two jobs', async () => {
  const t0 = Date.now();
  stack.start();
  tok = stack.token('chaos', 'submit');
  const adminTok = stack.token('chaos-admin', 'admin');
  const st = stackJson();
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  const add = stack.cli('webhook', 'add', `http://127.0.0.1:${receiver.address().port}/hook`);
  assert.equal(add.rc, 0, add.err);
  secret = add.out.trim().split('\n').pop();

  // Submit JOBS jobs, one every 250 ms, while the chaos schedule runs beside them.
  const log = [];
  const kills = [];
  const jobs = [];
  const killApi = async () => {
    const before = apiRun().pid;
    process.kill(before, 'SIGKILL');
    kills.push({ what: 'api', pid: before, at_ms: Date.now() - t0 });
    // A keyed POST sent at once meets the dead API (its port is closed): retried with its key.
    jobs.push(submit(JOBS + kills.length, true, log));
    const after = await until('the API restarted', () => {
      try {
        const r = apiRun();
        return r.pid !== before && r;
      } catch { return false; }
    }, 20000);
    // Restarted by the supervisor: its child, counted in stack.json's restarts.
    assert.equal(ppid(after.pid), st.supervisor_pid, 'the API was not restarted by the supervisor');
    return after.pid;
  };
  const killRedis = async () => {
    const pid = Number(fs.readFileSync(path.join(stack.dir, 'redis', 'redis.pid'), 'utf8'));
    process.kill(pid, 'SIGKILL');
    kills.push({ what: 'redis', pid, at_ms: Date.now() - t0 });
    await until('Redis restarted', () => {
      const s = stackJson().processes.find((p) => p.name === 'redis');
      return s.pid > 0 && s.pid !== pid;
    }, 20000);
  };
  const chaos = (async () => {
    for (const kill of [killApi, killRedis, killApi, killRedis]) {
      await sleep(1600);
      await kill();
    }
  })();
  for (let i = 0; i < JOBS; i++) {
    jobs.push(submit(i, i % 3 !== 2, log));
    await sleep(220);
  }
  await chaos;
  const results = await Promise.all(jobs);
  const apiProc = stackJson().processes.find((p) => p.name.startsWith('api'));
  assert.ok(apiProc.restarts >= 2, JSON.stringify(apiProc));
  const failedTries = log.filter((x) => x.status !== 200);
  console.log(`kills: ${JSON.stringify(kills)}; POSTs without a 200: ${failedTries.length} ` +
    `(${JSON.stringify(failedTries.slice(0, 8))})`);
  // The outage was real: some POST failed and was retried with its key.
  assert.ok(results.some((r) => r.keyed && r.tries > 1), 'no keyed POST needed a retry: the kills missed the submissions');

  // Every video that exists (accepted, or made by an unanswered unkeyed POST), by prompt.
  // Read as admin (no rate limit; it sees every video, all of them this test's).
  const client = new OpenAI({ apiKey: adminTok, baseURL: `http://127.0.0.1:${apiRun().health_port}/v1`, maxRetries: 0 });
  const all = [];
  for await (const v of client.videos.list({ limit: 100 })) all.push(v);
  const byPrompt = new Map();
  for (const v of all) byPrompt.set(v.prompt, [...(byPrompt.get(v.prompt) ?? []), v]);
  for (const r of results) {
    const made = byPrompt.get(r.body.prompt) ?? [];
    if (r.video) {
      assert.deepEqual(made.map((v) => v.id), [r.video.id], `job ${r.i}: ${made.length} videos for one request`);
    } else {
      assert.ok(made.length <= 1, `unkeyed job ${r.i}: ${made.length} videos`);
    }
  }
  assert.equal(all.length, byPrompt.size);

  // Every one completes.
  await until('every video completed', async () => {
    const states = await Promise.all(all.map((v) => client.videos.retrieve(v.id)));
    for (const s of states) assert.ok(['queued', 'in_progress', 'completed'].includes(s.status), JSON.stringify(s));
    return states.every((s) => s.status === 'completed');
  }, 60000);

  // Exactly one MP4 per video, none for anything else, no .part left, no stage output twice.
  const outputs = path.join(stack.dir, 'outputs');
  const runs = fs.readdirSync(outputs).filter((d) => fs.statSync(path.join(outputs, d)).isDirectory());
  assert.deepEqual(runs.sort(), all.map((v) => v.run_id).sort());
  for (const run of runs) {
    const files = fs.readdirSync(path.join(outputs, run));
    const mp4 = files.filter((f) => f.endsWith('.mp4'));
    assert.deepEqual(mp4, ['video.mp4'], `${run}: ${files}`);
    assert.equal(fs.readFileSync(path.join(outputs, run, 'video.mp4')).subarray(4, 8).toString(), 'ftyp');
    assert.deepEqual(files.filter((f) => f.endsWith('.part')), [], `${run}: ${files}`);
    const job = stack.redis('HGETALL', `h3pipe:run:{${run}}:job:video`).split('\n');
    for (let k = 0; k + 1 < job.length; k += 2)
      if (job[k].startsWith('wrote:')) assert.ok(Number(job[k + 1]) <= 1, `${run}: ${job[k]} = ${job[k + 1]}`);
  }

  // Every key again, after the run and the Redis restart: the same video, never a second job.
  for (const r of results.filter((x) => x.keyed)) {
    const again = await post(r.body, r.key);
    assert.equal(again.status, 200);
    assert.equal(again.json.id, r.video.id, `key ${r.key} made a second video`);
  }
  assert.equal((await client.videos.list({ limit: 100 })).data.length, all.length);

  // Webhooks: each completed video's event arrived, verified, one webhook-id, a 2xx given.
  await until('every video.completed delivered', () =>
    all.every((v) => deliveries.some((d) => d.event?.data?.id === v.id && d.status === 200)), 30000);
  assert.deepEqual(deliveries.filter((d) => d.error).map((d) => d.error), []);
  for (const v of all) {
    const mine = deliveries.filter((d) => d.event.data.id === v.id);
    assert.deepEqual([...new Set(mine.map((d) => d.event.type))], ['video.completed'], v.id);
    assert.equal(new Set(mine.map((d) => d.id)).size, 1, `${v.id}: webhook-ids ${mine.map((d) => d.id)}`);
  }
  assert.ok(refusedOnce.size >= Math.floor(all.length / 3), `${refusedOnce.size} refused`);
  for (const id of refusedOnce) assert.ok(attempts.get(id) >= 2, `${id} was refused and never sent again`);
  await until('nothing pending', () => /^pending\t0$/m.test(stack.cli('webhook', 'list').out), 20000);
  assert.doesNotMatch(stack.cli('webhook', 'list').out, /^dead\t/m);
  const again = [...attempts].filter(([id, n]) => n > 1 && !refusedOnce.has(id)).length;
  console.log(`videos ${all.length}, deliveries ${deliveries.length} (${refusedOnce.size} ids refused once, ` +
    `${again} others sent again after a kill), ` +
    `wall ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
