// GET and POST latency of h3pipe-api at a fixed request rate (issue #37, `scripts/bench.sh api`),
// beside the same work done with raw Redis: GET /v1/videos/{id} against HGETALL of its record,
// POST /v1/videos (a JSON body: validate, reserve, submit, record) against one XADD of a spec.
// Open loop: request i is sent at start + i / RATE whatever the earlier ones do, and its latency
// counts from that moment to the whole reply (so queueing behind a slow reply is measured).  Each
// HTTP request has a connection of its own (the API answers Connection: close); the Redis side
// uses CONNS persistent connections, round robin.  The last line is one JSON object.
//   node bench/api/requests.mjs  (env: API_PORT TOKEN VIDEO REDIS_HOST REDIS_PORT REDIS_USER
//                                 REDIS_PASSWORD [RATE=500 SECONDS=10 CONNS=8])
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { redisClient, stats } from './resp.mjs';

const env = process.env;
const RATE = Number(env.RATE ?? 500), SECONDS = Number(env.SECONDS ?? 10), CONNS = Number(env.CONNS ?? 8);
const N = Math.round(RATE * SECONDS);
const now = () => performance.now();
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

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
    while (now() < at) { /* the last millisecond spun, so sends keep their schedule */ }
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
const spec = JSON.stringify({ jobId: 'video', prompt: 'bench', jobClass: 'slow' });
const body = JSON.stringify({ prompt: 'bench', model: 'slow' });
// Warm both sides (connections, the API's Redis pool, page cache).
for (let i = 0; i < 50; ++i) await httpCall('GET', `/v1/videos/${env.VIDEO}`);

const get = await openLoop(() => httpCall('GET', `/v1/videos/${env.VIDEO}`), (s) => s === 200);
const hgetall = await openLoop((i) => conns[i % CONNS].call('HGETALL', `h3pipe:api:video:${env.VIDEO}`).then(() => true, () => false), (r) => r);
const post = await openLoop(() => httpCall('POST', '/v1/videos', body), (s) => s === 200);
const xadd = await openLoop((i) => conns[i % CONNS].call('XADD', 'h3pipe:bench:xadd', 'MAXLEN', '~', '100000', '*', 'run', `r-bench-${i}`, 'spec', spec)
  .then(() => true, () => false), (r) => r);
await conns[0].call('DEL', 'h3pipe:bench:xadd');
for (const c of conns) c.close();

const r2 = (x) => Number(x.toFixed(2));
console.log(JSON.stringify({
  bench: 'api', rate_per_s: RATE, seconds: SECONDS, requests_each: N,
  get_video: get, redis_hgetall: hgetall, post_video: post, redis_xadd: xadd,
  goal: { get_p99_ms: 2, post_p99_ms: 5 },
  get_p99_over_goal: r2(get.p99_ms / 2), post_p99_over_goal: r2(post.p99_ms / 5),
  get_p99_over_redis: r2(get.p99_ms / hgetall.p99_ms), post_p99_over_redis: r2(post.p99_ms / xadd.p99_ms),
  met: get.p99_ms <= 2 && post.p99_ms <= 5 && get.failed === 0 && post.failed === 0,
}));
