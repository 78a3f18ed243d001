// No request to any port may starve a service's other clients (issue #35 item 5, #37): 200
// loopback connections to h3pipe-api that send nothing, or half a request head, must not keep
// GET /readyz or an authenticated GET /v1/models from answering within 2 s.  A real stack
// (`h3pipe start`: private redis-server, h3pipe-api on a free loopback port).  Run by ctest
// (api_stalled_clients_e2e); before the accept gate (common/api/gate.h) the 16 httplib worker
// threads were held by the first 16 stalled sockets for 10 s each.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { Stack, fixed } from './stack.mjs';

const stack = new Stack('h3stall-', {
  name: 'api-stall',
  hosts: [{ name: 'local' }],
  pools: [
    { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.01) } },
    { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(0.1) } },
    { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.02) } },
  ],
});

let port, tok;
before(() => {
  stack.start();
  tok = stack.token('rita', 'read');
  port = stack.runFile().health_port;
});

after(() => stack.stop());

// Opens n sockets; half send nothing, half send the start of a request head and stop.
async function stall(n) {
  const socks = [];
  await Promise.all(Array.from({ length: n }, (_, i) => new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => {
      if (i % 2) s.write('GET /v1/models HTTP/1.1\r\nHost: x\r\n');
      resolve();
    });
    s.on('error', () => resolve());  // an evicted socket may be reset: that is the point
    socks.push(s);
  })));
  return socks;
}

async function timed(url, headers = {}) {
  const t0 = Date.now();
  const r = await fetch(url, { headers, signal: AbortSignal.timeout(2000) });
  const body = await r.text();
  return { status: r.status, body, ms: Date.now() - t0 };
}

test('200 stalled connections: /readyz and GET /v1/models still answer within 2 s', async () => {
  const socks = await stall(200);
  try {
    for (let round = 0; round < 3; round++) {
      const [ready, models] = await Promise.all([
        timed(`http://127.0.0.1:${port}/readyz`),
        timed(`http://127.0.0.1:${port}/v1/models`, { Authorization: `Bearer ${tok}` }),
      ]);
      assert.equal(ready.status, 200, ready.body);
      assert.equal(models.status, 200, models.body);
      assert.equal(JSON.parse(models.body).object, 'list');
      assert.ok(ready.ms < 2000 && models.ms < 2000, JSON.stringify({ ready: ready.ms, models: models.ms }));
      // More stallers arrive while the service answers.
      socks.push(...await stall(50));
    }
  } finally {
    for (const s of socks) s.destroy();
  }
});
