// GET and POST latency of h3pipe-api at a fixed request rate (issue #37, `scripts/bench.sh api`),
// beside the same work done with raw Redis: GET /v1/videos/{id} against HGETALL of its record,
// POST /v1/videos (a JSON body: validate, reserve, submit, record) against one XADD of a spec.
// Open loop: request i is sent at start + i / RATE whatever the earlier ones do, and its latency
// counts from that moment to the whole reply (so queueing behind a slow reply is measured).  HTTP
// requests reuse kept-alive connections as the openai SDK's client does (KEEPALIVE=0: a new
// connection for each request, connect and close counted in its latency); the Redis side uses
// CONNS persistent connections, round robin.  Every request carries the same bearer token, body
// and route either way.  GET and POST are timed twice: with node:http (as the SDKs send them) and
// with a minimal keep-alive HTTP client over CONNS connections (bench/api/http_raw.mjs), the same
// kind of client as the Redis side's, so that the server's part is not hidden behind node:http's
// own (get_video_raw, post_video_raw).  The last line is one JSON object.
//   node bench/api/requests.mjs  (env: API_PORT TOKEN VIDEO REDIS_HOST REDIS_PORT REDIS_USER
//                                 REDIS_PASSWORD [RATE=500 SECONDS=10 CONNS=8 KEEPALIVE=1])
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { httpRawClient } from './http_raw.mjs';
import { redisClient, stats } from './resp.mjs';

const env = process.env;
const RATE = Number(env.RATE ?? 500), SECONDS = Number(env.SECONDS ?? 10), CONNS = Number(env.CONNS ?? 8);
const N = Math.round(RATE * SECONDS);
const now = () => performance.now();
const KEEPALIVE = (env.KEEPALIVE ?? '1') !== '0';
const sleeper = new Int32Array(new SharedArrayBuffer(4));
const agent = new http.Agent({ keepAlive: KEEPALIVE, maxSockets: Infinity });

function httpCall(method, path, body) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: Number(env.API_PORT), method, path, agent,
      headers: { Authorization: `Bearer ${env.TOKEN}`, ...(body ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } : {}) } },
    (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', () => resolve(0));
    if (body) req.write(body);
    req.end();
  });
}

// Sends `one(i)` at RATE per second for N requests; the latency of each, and the failures.
async function openLoop(one, ok) {
  const lat = [];
  let failed = 0;
  const t0 = now() + 50;
  const all = [];
  for (let i = 0; i < N; ++i) {
    const at = t0 + (i * 1000) / RATE;
    const wait = at - now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait - 1));
    // The last millisecond slept to the microsecond (a futex wait) rather than spun: the loop is
    // held either way, but a spin took a quarter of the 2-core machine's CPU from the server.
    const left = at - now();
    if (left > 0) Atomics.wait(sleeper, 0, 0, left);
    all.push(one(i).then((r) => {
      if (ok(r)) lat.push(now() - at);
      else failed += 1;
    }));
  }
  await Promise.all(all);
  return { ...stats(lat, N), failed };
}

const conns = [];
for (let i = 0; i < CONNS; ++i) {
  const c = redisClient();
  await c.call('AUTH', env.REDIS_USER, env.REDIS_PASSWORD);
  conns.push(c);
}
const raws = [];
for (let i = 0; i < CONNS; ++i) raws.push(httpRawClient(Number(env.API_PORT)));
const auth = { Authorization: `Bearer ${env.TOKEN}` };
const spec = JSON.stringify({ jobId: 'video', prompt: 'bench', jobClass: 'slow' });
const body = JSON.stringify({ prompt: 'bench', model: 'slow' });
// Warm both sides (connections, the API's Redis pool, page cache).
for (let i = 0; i < 50; ++i) await httpCall('GET', `/v1/videos/${env.VIDEO}`);
for (let i = 0; i < 50; ++i) await raws[i % CONNS].call('GET', `/v1/videos/${env.VIDEO}`, auth);

const get = await openLoop(() => httpCall('GET', `/v1/videos/${env.VIDEO}`), (s) => s === 200);
const getRaw = await openLoop((i) => raws[i % CONNS].call('GET', `/v1/videos/${env.VIDEO}`, auth), (s) => s === 200);

// Cancel frees the pool (#37 item 5), from the HTTP side: VIDEO holds the only sample pool (s0,
// a sampler that checks for a cancel every 50 ms); B waits for it.  From the DELETE of VIDEO to
// the pool's next claim (B's sample stage.started, its ts_ms the worker's wall clock); the bound:
// one check interval + 1 s.
async function cancelDelay() {
  const json = (method, path, body) => new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port: Number(env.API_PORT), method, path, agent,
      headers: { Authorization: `Bearer ${env.TOKEN}`, ...(body ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } : {}) } },
    (res) => { let t = ''; res.on('data', (d) => { t += d; }); res.on('end', () => resolve({ status: res.statusCode, body: t })); });
    req.on('error', (e) => resolve({ status: 0, body: String(e) }));
    if (body) req.write(body);
    req.end();
  });
  const b = JSON.parse((await json('POST', '/v1/videos', body)).body);
  const events = `h3pipe:run:{${b.id.slice('video_'.length)}}:events`;
  const started = async () => ((await conns[0].call('XRANGE', events, '-', '+')) ?? [])
    .map(([, f]) => Object.fromEntries(f.flatMap((v, i) => (i % 2 ? [] : [[v, f[i + 1]]]))))
    .find((e) => e.type === 'stage.started' && e.stage === 'sample');
  // B encoded and waiting for the sampler (its encode takes 0.01 s).
  for (let i = 0; i < 500; ++i) {
    const v = JSON.parse((await json('GET', `/v1/videos/${b.id}`)).body);
    if (v.stage === 'queued' || v.stage === 'encode' || v.stage === '') await new Promise((r) => setTimeout(r, 10));
    else break;
  }
  const t0 = Date.now();
  const del = await json('DELETE', `/v1/videos/${env.VIDEO}`);
  const deleteMs = Date.now() - t0;
  for (let i = 0; i < 3000; ++i) {
    const e = await started();
    if (e) return { delete_status: del.status, delete_reply_ms: deleteMs, to_next_claim_ms: Number(e.ts_ms) - t0, pool: e.pool, goal_ms: 1050 };
    await new Promise((r) => setTimeout(r, 5));
  }
  return { delete_status: del.status, delete_reply_ms: deleteMs, to_next_claim_ms: null, goal_ms: 1050 };
}
const cancel = await cancelDelay();
const hgetall = await openLoop((i) => conns[i % CONNS].call('HGETALL', `h3pipe:api:video:${env.VIDEO}`).then(() => true, () => false), (r) => r);
const post = await openLoop(() => httpCall('POST', '/v1/videos', body), (s) => s === 200);
const postRaw = await openLoop((i) => raws[i % CONNS].call('POST', '/v1/videos', { ...auth, 'Content-Type': 'application/json' }, body), (s) => s === 200);
const xadd = await openLoop((i) => conns[i % CONNS].call('XADD', 'h3pipe:bench:xadd', 'MAXLEN', '~', '100000', '*', 'run', `r-bench-${i}`, 'spec', spec)
  .then(() => true, () => false), (r) => r);
await conns[0].call('DEL', 'h3pipe:bench:xadd');
for (const c of conns) c.close();
for (const c of raws) c.close();

const r2 = (x) => Number(x.toFixed(2));
console.log(JSON.stringify({
  bench: 'api', rate_per_s: RATE, seconds: SECONDS, requests_each: N, http_keep_alive: KEEPALIVE,
  get_video: get, get_video_raw: getRaw, redis_hgetall: hgetall, post_video: post, post_video_raw: postRaw, redis_xadd: xadd, cancel,
  goal: { get_p99_ms: 2, post_p99_ms: 5 },
  get_p99_over_goal: r2(get.p99_ms / 2), post_p99_over_goal: r2(post.p99_ms / 5),
  get_p99_over_redis: r2(get.p99_ms / hgetall.p99_ms), post_p99_over_redis: r2(post.p99_ms / xadd.p99_ms),
  cancel_over_goal: cancel.to_next_claim_ms === null ? null : r2(cancel.to_next_claim_ms / cancel.goal_ms),
  met: get.p99_ms <= 2 && post.p99_ms <= 5 && get.failed === 0 && post.failed === 0,
  met_raw_client: getRaw.p99_ms <= 2 && postRaw.p99_ms <= 5 && getRaw.failed === 0 && postRaw.failed === 0,
}));
