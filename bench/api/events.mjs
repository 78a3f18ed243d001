// Event delay with many Server-Sent Events subscribers (issue #37, `scripts/bench.sh api-events`):
// N subscribers of one run's events through h3pipe-api (GET /v1/runs/{id}/events), then the same
// N as raw Redis clients (XREAD BLOCK on the run's stream, what the API itself does once for all
// of them); a producer XADDs E events at R per second, each carrying its send time, and every
// subscriber's delay (receipt - send, one process, one monotonic clock) is collected.  The last
// line is one JSON object: p50/p99/max per side, the ratio of the p99s, the goal (p99 <= 50 ms).
//   node bench/api/events.mjs  (env: API_PORT TOKEN RUN REDIS_HOST REDIS_PORT REDIS_USER
//                               REDIS_PASSWORD [SUBSCRIBERS=1000 EVENTS=200 RATE=20])
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { redisClient, stats } from './resp.mjs';

const env = process.env;
const N = Number(env.SUBSCRIBERS ?? 1000), E = Number(env.EVENTS ?? 200), RATE = Number(env.RATE ?? 20);
const run = env.RUN, key = `h3pipe:run:{${run}}:events`;
const now = () => performance.now();

// The RESP client and the percentiles: bench/api/resp.mjs (shared with requests.mjs).

// ---- the producer --------------------------------------------------------------------------
async function produce(redis) {
  for (let i = 0; i < E; ++i) {
    await redis.call('XADD', key, 'MAXLEN', '~', '100000', '*', 'type', 'step', 'job', 'video', 'step', String(i + 1), 'steps', String(E),
      'ts_ms', String(Date.now()), 'bench_ms', now().toFixed(3));
    await new Promise((r) => setTimeout(r, 1000 / RATE));
  }
  await new Promise((r) => setTimeout(r, 1000));  // the last ones arrive
}

// ---- SSE subscribers through h3pipe-api ------------------------------------------------------
async function sse(after) {
  const delays = [], reqs = [];
  const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });
  const one = () => new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port: Number(env.API_PORT), agent, path: `/v1/runs/${run}/events?after=${after}`,
      headers: { Authorization: `Bearer ${env.TOKEN}` } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`subscribe: HTTP ${res.statusCode}`));
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (c) => {
        buf += c;
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          const d = block.split('\n').find((l) => l.startsWith('data: '));
          if (!d) continue;
          const sent = JSON.parse(d.slice(6)).bench_ms;
          if (sent) delays.push(now() - Number(sent));
        }
      });
      resolve();
    });
    req.on('error', reject);
    reqs.push(req);
  });
  for (let i = 0; i < N; i += 50) await Promise.all(Array.from({ length: Math.min(50, N - i) }, one));
  return { delays, close: () => reqs.forEach((r) => r.destroy()) };
}

// ---- raw Redis subscribers: XREAD BLOCK each -------------------------------------------------
async function raw(after) {
  const delays = [], clients = [];
  let stop = false;
  for (let i = 0; i < N; ++i) {
    const c = redisClient();
    await c.call('AUTH', env.REDIS_USER, env.REDIS_PASSWORD);
    clients.push(c);
    (async () => {
      let last = after;
      while (!stop) {
        const r = await c.call('XREAD', 'BLOCK', '1000', 'STREAMS', key, last).catch(() => null);
        if (!r) continue;
        const t = now();
        for (const [id, kv] of r[0][1]) {
          last = id;
          const at = kv.indexOf('bench_ms');
          if (at >= 0) delays.push(t - Number(kv[at + 1]));
        }
      }
    })();
  }
  return { delays, close: () => { stop = true; clients.forEach((c) => c.close()); } };
}

const producer = redisClient();
await producer.call('AUTH', env.REDIS_USER, env.REDIS_PASSWORD);
const tail = async () => (await producer.call('XADD', key, '*', 'type', 'step', 'job', 'video', 'ts_ms', String(Date.now())));

const s = await sse(await tail());
await new Promise((r) => setTimeout(r, 500));  // every subscriber attached by the hub
await produce(producer);
s.close();
const sseStats = stats(s.delays, N * E);

const r = await raw(await tail());
await new Promise((res) => setTimeout(res, 500));
await produce(producer);
r.close();
const rawStats = stats(r.delays, N * E);
producer.close();

const out = {
  bench: 'api-events', subscribers: N, events: E, rate_per_s: RATE,
  sse: sseStats, raw_redis_xread: rawStats,
  p99_ratio: Number((sseStats.p99_ms / rawStats.p99_ms).toFixed(2)),
  p99_over_goal: Number((sseStats.p99_ms / 50).toFixed(2)),
  goal_p99_ms: 50, meets_goal: sseStats.p99_ms <= 50 && sseStats.delivered === N * E,
};
console.log(`SSE event delay with ${N} subscribers: p50 ${sseStats.p50_ms} ms, p99 ${sseStats.p99_ms} ms, max ${sseStats.max_ms} ms (${sseStats.delivered}/${N * E} delivered)`);
console.log(`raw Redis XREAD, ${N} clients:       p50 ${rawStats.p50_ms} ms, p99 ${rawStats.p99_ms} ms, max ${rawStats.max_ms} ms (${rawStats.delivered}/${N * E})`);
console.log(`p99 ratio SSE / raw: ${out.p99_ratio}  SSE p99 / goal 50 ms: ${out.p99_over_goal}`);
console.log(JSON.stringify(out));
process.exit(0);
