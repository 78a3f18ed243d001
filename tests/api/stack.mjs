// A real local stack for the API tests (issue #37): `h3pipe start` with a config of the caller's
// (private redis-server, the sim runtime writing real MP4s, h3pipe-api on a free loopback port),
// tokens from `h3pipe token create`, and `h3pipe stop` at the end.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const bin = process.env.H3PIPE_BIN ?? path.resolve('build/bin');
export const fixed = (s) => ({ kind: 'fixed', seconds: s });

// The default pools: encode, two samplers, decode on one host "local".
export function defaultConfig(name, extra = {}) {
  return {
    name,
    queue: { lease_ms: 1500, renew_ms: 300, sweep_ms: 200, max_deliveries: 3, block_ms: 50 },
    classes: [{ name: 'slow', width: 128, height: 96, frames: 9, steps: 6 }],
    hosts: [{ name: 'local' }],
    pools: [
      { name: 'enc', host: 'local', stage: 'encode', profiles: { default: fixed(0.01) } },
      { name: 's0', host: 'local', stage: 'sample', profiles: { default: fixed(0.1), slow: fixed(60) } },
      { name: 's1', host: 'local', stage: 'sample', profiles: { default: fixed(0.1), slow: fixed(60) } },
      { name: 'dec', host: 'local', stage: 'decode', profiles: { default: fixed(0.02) } },
    ],
    ...extra,
  };
}

// The callers the API tests act as, by role: alice and bob submit (each sees only its own runs),
// rita reads, root is an admin (no rate limit).
export const CALLERS = { alice: 'submit', bob: 'submit', rita: 'read', root: 'admin' };

// The stack's state dir (and cluster.json) is a fresh temp dir named after prefix; env (optional)
// is the environment of every `h3pipe` command (and so of the services `h3pipe start` starts).
export class Stack {
  constructor(prefix, config, { env } = {}) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    this.config = path.join(this.dir, 'cluster.json');
    this.env = env;
    fs.writeFileSync(this.config, JSON.stringify({ state_dir: this.dir, ...config }));
  }
  cli(...args) {
    const r = spawnSync(path.join(bin, 'h3pipe'), ['--config', this.config, ...args], { encoding: 'utf8', env: this.env });
    return { rc: r.status, out: r.stdout, err: r.stderr };
  }
  // `h3pipe start`; its output stays in startOut.  origin and base are the API's URL now.
  start() {
    const s = this.cli('start');
    assert.equal(s.rc, 0, s.err + s.out);
    this.startOut = s.out;
    this.origin = `http://127.0.0.1:${this.runFile().health_port}`;
    this.base = `${this.origin}/v1`;
    return this;
  }
  // A service's run file (pid, bind, health_port, metrics_port); the API's by default.  Read
  // afresh: the supervisor restarts a killed service on a new port.
  runFile(service = 'api-local') {
    return JSON.parse(fs.readFileSync(path.join(this.dir, 'run', `${service}.json`), 'utf8'));
  }
  token(name, role) {
    const r = this.cli('token', 'create', name, '--role', role);
    assert.equal(r.rc, 0, r.err);
    return r.out.trim().split('\n').pop();
  }
  // A token for each of the usual callers (CALLERS), or for those named: { alice, bob, rita, root }.
  tokens(names = Object.keys(CALLERS)) {
    return Object.fromEntries(names.map((n) => [n, this.token(n, CALLERS[n])]));
  }
  // redis-cli as the stack's redis-admin (the test's own view of Redis); throws on an error.
  // redisInput sends commands on stdin, one a line.
  redis(...args) {
    return this.#redisCli(args);
  }
  redisInput(commands) {
    return this.#redisCli([], commands);
  }
  #redisCli(args, input) {
    const st = JSON.parse(fs.readFileSync(path.join(this.dir, 'stack.json'), 'utf8'));
    const pw = fs.readFileSync(path.join(this.dir, 'secrets', 'redis-admin.password'), 'utf8').trim();
    const where = st.redis.host.startsWith('/') ? ['-s', st.redis.host] : ['-h', st.redis.host, '-p', String(st.redis.port)];
    const r = spawnSync('redis-cli', [...where, '--user', 'redis-admin', '--pass', pw, '--no-auth-warning', ...args],
      { encoding: 'utf8', input, maxBuffer: 1 << 26 });
    assert.equal(r.status, 0, `${r.stderr} ${r.error ?? ''} ${r.signal ?? ''}`);
    assert.doesNotMatch(r.stdout, /^(ERR|WRONGTYPE|NOPERM)/m, r.stdout.slice(0, 2000));
    return r.stdout.trim();
  }
  stop() {
    const st = this.cli('stop');
    if (st.rc === 0) fs.rmSync(this.dir, { recursive: true, force: true });  // kept when stop failed
  }
}

// fetch with a bearer token; the JSON body parsed when there is one.
export async function call(base, tok, method, p, body, headers = {}) {
  const h = { Authorization: `Bearer ${tok}`, ...headers };
  let b = body;
  if (body !== undefined && typeof body !== 'string' && !(body instanceof Uint8Array) && !(body instanceof FormData)) {
    b = JSON.stringify(body);
    h['Content-Type'] = 'application/json';
  }
  const res = await fetch(base + p, { method, headers: h, body: b });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, json, text };
}

// Polls fn every `every` ms until it returns a truthy value (returned); throws after ms.
export async function until(what, fn, ms = 60000, every = 100) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}
