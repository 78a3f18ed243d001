// Server-Sent Events of h3pipe-api (issue #37 item 3): GET /v1/videos/{id}/events and
// /v1/runs/{id}/events against a real local stack (`h3pipe start`, the API it starts).  Events are
// the run's capped stream (keys::run_events, the events contract); a client that disconnects and
// reconnects with Last-Event-ID gets exactly what it missed, then live events, none twice.
// Subscribers hold no pool thread: 40 open streams (the pool has 16) and requests still answer.
// Run by ctest (api_events_e2e).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { Stack, call, fixed, until } from './stack.mjs';

const stack = new Stack('h3events-', {
  name: 'api-events-e2e',
  queue: { lease_ms: 1500, renew_ms: 300, sweep_ms: 200, max_deliveries: 3, block_ms: 50 },
  classes: [{ name: 'slow', width: 128, height: 96, frames: 9, steps: 6 }],
  hosts: [{ name: 'local' }],
  pools: [
    { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.01) } },
    { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(0.1), slow: fixed(600) } },
    { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.02) } },
  ],
});
// A command as redis-admin (the test writes events the way the producers do: XADD to the
// run's stream with the contract's fields).
const redis = (...args) => stack.redis(...args);
const streamOf = (run) => `h3pipe:run:{${run}}:events`;
function xadd(run, type, extra = {}) {
  const kv = Object.entries({ type, job: 'video', ts_ms: String(Date.now()), ...extra }).flat();
  return redis('XADD', streamOf(run), 'MAXLEN', '~', '100000', '*', ...kv);
}

let port, tok, adminTok;
before(() => {
  stack.start();
  // root: no rate limit (submit: 50 requests/s)
  ({ alice: tok, root: adminTok } = stack.tokens(['alice', 'root']));
  port = stack.runFile().health_port;
});
after(() => stack.stop());

// An SSE subscriber: parses the stream into {id, event, data} as EventSource does.
function subscribe(urlPath, headers = {}, t = tok) {
  const events = [];
  const waiters = [];
  let status, contentType, comments = 0, closed = false;
  const req = http.get({ host: '127.0.0.1', port, path: urlPath, headers: { Authorization: `Bearer ${t}`, ...headers } });
  const opened = new Promise((resolve, reject) => {
    req.on('error', (e) => (closed ? resolve() : reject(e)));
    req.on('response', (res) => {
      status = res.statusCode;
      contentType = res.headers['content-type'];
      let buf = '', body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        if (status !== 200) { body += chunk; return; }
        buf += chunk;
        let at;
        while ((at = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, at);
          buf = buf.slice(at + 2);
          const ev = {};
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) { comments++; continue; }
            const c = line.indexOf(':');
            const k = line.slice(0, c), v = line.slice(c + 1).replace(/^ /, '');
            if (k === 'data') ev.data = JSON.parse(v);
            else if (k === 'id' || k === 'event') ev[k] = v;
          }
          if (ev.id) events.push(ev);
          for (const w of waiters.splice(0)) w();
        }
      });
      res.on('end', () => { closed = true; for (const w of waiters.splice(0)) w(); });
      resolve({ status, contentType, body: () => body });
    });
  });
  const until = async (n, ms = 10000) => {
    const deadline = Date.now() + ms;
    while (events.length < n) {
      if (Date.now() > deadline) throw new Error(`${urlPath}: ${events.length} of ${n} events after ${ms} ms: ${JSON.stringify(events)}`);
      await new Promise((r) => { waiters.push(r); setTimeout(r, 50); });
    }
    return events;
  };
  return { opened, events, until, close: () => { closed = true; req.destroy(); }, comments: () => comments };
}

const api = (method, p, body, t = tok) => call(stack.base, t, method, p, body);

test('a real job: its events from video.queued to video.completed, as the pipeline writes them', async () => {
  const v = await api('POST', '/videos', { prompt: 'a real fox', size: '256x256', seconds: '1' });
  assert.equal(v.status, 200, JSON.stringify(v.json));
  const s = subscribe(`/v1/videos/${v.json.id}/events`);
  assert.equal((await s.opened).status, 200);
  const deadline = Date.now() + 60000;
  while (!s.events.some((e) => e.event === 'video.completed')) {
    assert.ok(Date.now() < deadline, `no video.completed: ${JSON.stringify(s.events)}`);
    await s.until(s.events.length + 1, 60000);
  }
  const types = s.events.map((e) => e.event);
  assert.equal(types[0], 'video.queued');
  assert.equal(types.at(-1), 'video.completed');
  const finished = s.events.filter((e) => e.event === 'stage.finished').map((e) => e.data.stage);
  for (const stage of ['encode', 'sample', 'decode']) assert.ok(finished.includes(stage), JSON.stringify(types));
  assert.ok(s.events.every((e) => e.data.job === 'video' && e.data.type === e.event));
  const ids = s.events.map((e) => e.id);
  assert.deepEqual(ids, redis('XRANGE', streamOf(v.json.run_id), '-', '+').split('\n').filter((l) => /^\d+-\d+$/.test(l)));
  s.close();
});

test('a subscriber gets the run\'s events, then live ones; reconnecting with Last-Event-ID it misses nothing and gets nothing twice', async () => {
  const v = await api('POST', '/videos', { prompt: 'events of a slow fox', model: 'slow' });
  assert.equal(v.status, 200, JSON.stringify(v.json));
  const run = v.json.run_id;
  // What the stream already holds (the producers' own events, if any, and ours).
  const ids = [];
  ids.push(xadd(run, 'stage.started', { stage: 'sample', host: 'local', pool: 's0', attempt: '1' }));
  for (let k = 1; k <= 3; ++k) ids.push(xadd(run, 'step', { stage: 'sample', step: String(k), steps: '6' }));
  const all = () => redis('XRANGE', streamOf(run), '-', '+').split('\n').filter((l) => /^\d+-\d+$/.test(l));

  const a = subscribe(`/v1/videos/${v.json.id}/events`);
  const head = await a.opened;
  assert.equal(head.status, 200);
  assert.equal(head.contentType, 'text/event-stream');
  const before = all();
  await a.until(before.length);
  assert.deepEqual(a.events.map((e) => e.id), before);  // every entry, in order, by its stream id
  const step2 = a.events.find((e) => e.id === ids[2]);
  assert.deepEqual([step2.event, step2.data.type, step2.data.step, step2.data.steps, step2.data.stage], ['step', 'step', '2', '6', 'sample']);
  // Live: what is added while connected arrives.
  ids.push(xadd(run, 'step', { stage: 'sample', step: '4', steps: '6' }));
  ids.push(xadd(run, 'step', { stage: 'sample', step: '5', steps: '6' }));
  await a.until(before.length + 2);
  const seen = a.events.slice(0, before.length + 1);  // the client goes away after one of those two
  a.close();
  // While it is away: more events.
  ids.push(xadd(run, 'step', { stage: 'sample', step: '6', steps: '6' }));
  ids.push(xadd(run, 'stage.finished', { stage: 'sample', host: 'local', pool: 's0', attempt: '1' }));
  const b = subscribe(`/v1/videos/${v.json.id}/events`, { 'Last-Event-ID': seen.at(-1).id });
  assert.equal((await b.opened).status, 200);
  const missed = all().filter((id) => !seen.some((e) => e.id === id));
  await b.until(missed.length);
  ids.push(xadd(run, 'video.completed', { stage: 'decode' }));
  await b.until(missed.length + 1);
  await new Promise((r) => setTimeout(r, 300));  // nothing more comes
  const got = [...seen, ...b.events].map((e) => e.id);
  assert.deepEqual(got, all(), 'seen before + after the reconnect = the whole stream, in order');
  assert.equal(new Set(got).size, got.length, 'no event twice');
  assert.equal(b.events.at(-1).event, 'video.completed');
  b.close();

  // The run's stream by its run id, from ?after=: the same entries after that id.
  const c = subscribe(`/v1/runs/${run}/events?after=${ids[3]}`);
  assert.equal((await c.opened).status, 200);
  const tail = all().slice(all().indexOf(ids[3]) + 1);
  await c.until(tail.length);
  assert.deepEqual(c.events.map((e) => e.id), tail);
  c.close();
});

test('errors: 401 without a token, 404 for an unknown id, 400 naming a bad Last-Event-ID', async () => {
  const noTok = await fetch(`http://127.0.0.1:${port}/v1/runs/r-x/events`);
  assert.equal(noTok.status, 401);
  assert.equal((await api('GET', '/videos/video_r-nope/events')).status, 404);
  const r404 = await api('GET', '/runs/r-nope/events');
  assert.equal(r404.status, 404);
  assert.match(r404.json.error.message, /no run with id "r-nope"/);
  const v = await api('POST', '/videos', { prompt: 'bad ids', model: 'slow' });
  const bad = subscribe(`/v1/videos/${v.json.id}/events`, { 'Last-Event-ID': 'yesterday' });
  const h = await bad.opened;
  assert.equal(h.status, 400);
  await new Promise((r) => setTimeout(r, 100));
  const err = JSON.parse(h.body()).error;
  assert.equal(err.param, 'Last-Event-ID');
  assert.match(err.message, /expected an event id/);
  const badAfter = await api('GET', `/runs/${v.json.run_id}/events?after=1-2-3`);
  assert.equal(badAfter.status, 400);
  assert.equal(badAfter.json.error.param, 'after');
});

test('40 open subscribers (the pool has 16 threads) hold no thread: requests still answer, and each gets the event', async () => {
  const v = await api('POST', '/videos', { prompt: 'many listeners', model: 'slow' });
  const subs = [], afters = [];
  for (let i = 0; i < 40; ++i) {
    afters.push(xadd(v.json.run_id, 'step', { step: String(i), steps: '40' }));
    subs.push(subscribe(`/v1/runs/${v.json.run_id}/events?after=${afters[i]}`, {}, adminTok));
  }
  for (const s of subs) assert.equal((await s.opened).status, 200);
  const mport = stack.runFile().metrics_port;
  const open = async () => Number((await (await fetch(`http://127.0.0.1:${mport}/metrics`)).text()).match(/^h3pipe_api_sse_clients (\d+)/m)[1]);
  assert.ok((await open()) >= 40, 'h3pipe_api_sse_clients counts the open streams');
  const t0 = Date.now();
  const models = await api('GET', '/models', undefined, adminTok);
  assert.equal(models.status, 200);
  assert.ok(Date.now() - t0 < 2000);
  const id = xadd(v.json.run_id, 'video.failed', { reason: 'test' });
  const all = redis('XRANGE', streamOf(v.json.run_id), '-', '+').split('\n').filter((l) => /^\d+-\d+$/.test(l));
  for (const [i, s] of subs.entries()) {
    const want = all.slice(all.indexOf(afters[i]) + 1);  // exactly what came after its id
    await s.until(want.length);
    assert.deepEqual(s.events.map((e) => e.id), want);
    assert.equal(s.events.at(-1).id, id);
    assert.equal(s.events.at(-1).data.reason, 'test');
  }
  for (const s of subs) s.close();
  await until('h3pipe_api_sse_clients back to 0 once every subscriber left', async () => (await open()) === 0, 5000);
});

test('a subscriber that stops reading is dropped once 1 MiB waits for it; reconnecting with Last-Event-ID it misses nothing', async () => {
  const v = await api('POST', '/videos', { prompt: 'a slow reader', model: 'slow' });
  const run = v.json.run_id;
  const start = xadd(run, 'step', { step: '0', steps: '1' });
  // A raw socket that reads nothing until the server has given up on it.
  const sock = net.connect(port, '127.0.0.1');
  await new Promise((r) => sock.once('connect', r));
  sock.pause();
  sock.write(`GET /v1/runs/${run}/events?after=${start} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${adminTok}\r\n\r\n`);
  await new Promise((r) => setTimeout(r, 300));
  // 12 MiB of events: more than the socket buffers and the hub's 1 MiB bound hold.
  const pad = 'x'.repeat(3000);
  const cmds = Array.from({ length: 4000 }, (_, i) => `XADD ${streamOf(run)} * type step job video step ${i + 1} steps 4000 pad ${pad}`).join('\n') + '\n';
  stack.redisInput(cmds);
  await new Promise((res) => setTimeout(res, 1000));
  // Now read what was sent before the drop, to its end (the server closed the socket).
  let text = '';
  sock.setEncoding('utf8');
  sock.on('data', (c) => (text += c));
  sock.resume();
  await new Promise((res, rej) => { sock.once('end', res); sock.once('error', rej); setTimeout(() => rej(new Error('the slow subscriber was not dropped')), 20000); });
  const seen = [...text.matchAll(/id: (\d+-\d+)\nevent: [^\n]*\ndata: [^\n]*\n\n/g)].map((m) => m[1]);
  const all = redis('XRANGE', streamOf(run), '-', '+').split('\n').filter((l) => /^\d+-\d+$/.test(l));
  const after = all.slice(all.indexOf(start) + 1);
  assert.ok(seen.length > 0 && seen.length < after.length, `${seen.length} of ${after.length} before the drop`);
  assert.deepEqual(seen, after.slice(0, seen.length));
  const b = subscribe(`/v1/runs/${run}/events`, { 'Last-Event-ID': seen.at(-1) }, adminTok);
  assert.equal((await b.opened).status, 200);
  await b.until(after.length - seen.length, 30000);
  assert.deepEqual([...seen, ...b.events.map((e) => e.id)], after);
  b.close();
});
