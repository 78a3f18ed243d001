// docs/openapi.json against the running h3pipe-api (issue #37 item 9): the file is valid OpenAPI
// 3.1 (@seriousme/openapi-schema-validator); every route the server registers (common/api/*.cpp,
// http.Get/Post/Delete) is in the file and every path+method of the file is a route; and each
// operation, called on a real local stack, answers with a status the file documents and a body
// its schema accepts (ajv, JSON Schema 2020-12), including the errors (400, 401, 403, 404, 429).
// Run by ctest (api_openapi_e2e); exits 77 when tests/api's npm packages are not installed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Stack, defaultConfig, call, until } from './stack.mjs';

let Validator, Ajv2020;
try {
  ({ Validator } = await import('@seriousme/openapi-schema-validator'));
  Ajv2020 = (await import('ajv/dist/2020.js')).default;
} catch (e) {
  console.log(`skipped: tests/api's npm packages are not installed (${e.message}); run scripts/setup.sh`);
  process.exit(77);
}

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const doc = JSON.parse(fs.readFileSync(path.join(root, 'docs/openapi.json'), 'utf8'));
const METHODS = ['get', 'post', 'delete', 'put', 'patch'];
const shape = (p) => p.replace(/\{[^}]+\}/g, '{}');

// The routes the server registers: each http.Get/Post/Delete(...) of common/api/*.cpp, its
// pattern resolved (a named prefix, "+ suffix") and each capture group read as one parameter.
function codeRoutes() {
  const out = new Set();
  const dir = path.join(root, 'common/api');
  for (const f of fs.readdirSync(dir).filter((n) => n.endsWith('.cpp'))) {
    const src = fs.readFileSync(path.join(dir, f), 'utf8');
    const consts = {};
    for (const m of src.matchAll(/const std::string (\w+)\s*=\s*(?:R"\((.*?)\)"|"([^"]*)")\s*;/g)) consts[m[1]] = m[2] ?? m[3];
    for (const m of src.matchAll(/\bhttp\.(Get|Post|Delete|Put|Patch)\(\s*([^,]+?),/gs)) {
      let p = '';
      const rest = m[2].replace(/R"\((.*?)\)"|"([^"]*)"|(\w+)|\s*\+\s*/gs, (all, r, q, name) => {
        if (r !== undefined || q !== undefined) p += r ?? q;
        else if (name !== undefined) {
          if (!(name in consts)) throw new Error(`${f}: cannot read the route pattern ${m[2]}`);
          p += consts[name];
        }
        return '';
      });
      if (rest.trim()) throw new Error(`${f}: cannot read the route pattern ${m[2]}`);
      out.add(`${m[1].toLowerCase()} ${p.replace(/\((?:[^()]|\([^()]*\))*\)/g, '{}')}`);
    }
  }
  return out;
}

test('docs/openapi.json is valid OpenAPI 3.1', async () => {
  const r = await new Validator().validate(doc);
  assert.ok(r.valid, JSON.stringify(r.errors, null, 1));
  assert.equal(doc.openapi, '3.1.0');
});

test('every route the server has is in the file, and every path+method of the file is a route', () => {
  const code = codeRoutes();
  const file = new Set();
  for (const [p, item] of Object.entries(doc.paths)) for (const m of METHODS) if (item[m]) file.add(`${m} ${shape(p)}`);
  assert.ok(code.size >= 20, [...code].join('\n'));
  assert.deepEqual([...code].filter((r) => !file.has(r)), [], 'routes missing from docs/openapi.json');
  assert.deepEqual([...file].filter((r) => !code.has(r)), [], 'operations of docs/openapi.json the server does not have');
});

// ---- the running server ----
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema({ $id: 'h3pipe', components: doc.components });
const rebase = (s) => JSON.parse(JSON.stringify(s).replaceAll('"#/components/', '"h3pipe#/components/'));
const validators = new Map();
function operation(method, p) {
  const item = doc.paths[p];
  assert.ok(item && item[method], `${method} ${p} is not in the file`);
  return item[method];
}
const seen = new Map();  // "method path" -> statuses answered
async function check(method, p, res) {
  const o = operation(method, p);
  const key = `${method} ${p}`;
  if (!seen.has(key)) seen.set(key, new Set());
  seen.get(key).add(res.status);
  let doc_ = o.responses[String(res.status)];
  assert.ok(doc_, `${key} answered ${res.status}, which the file does not document (${res.text?.slice(0, 200)})`);
  if (doc_.$ref) doc_ = doc.components.responses[doc_.$ref.split('/').pop()];
  const ctype = (res.headers.get('content-type') ?? '').split(';')[0];
  if (!doc_.content) return;
  assert.ok(doc_.content[ctype], `${key} ${res.status}: content type ${ctype} is not documented`);
  if (ctype !== 'application/json') return;
  const id = `${key} ${res.status}`;
  if (!validators.has(id)) validators.set(id, ajv.compile(rebase(doc_.content[ctype].schema)));
  const v = validators.get(id);
  assert.ok(v(res.json), `${id}: ${ajv.errorsText(v.errors)}\n${res.text.slice(0, 400)}`);
}

const stack = new Stack('h3openapi-', defaultConfig('api-openapi'));
let base, origin, tok;
before(() => {
  stack.start();
  base = stack.base;
  origin = base.replace(/\/v1$/, '');
  const { alice, rita, root } = stack.tokens(['alice', 'rita', 'root']);
  tok = { submit: alice, read: rita, admin: root };
});
after(() => stack.stop());

async function req(method, p, template, who, body, headers) {
  const res = await call(base, tok[who] ?? who, method.toUpperCase(), p, body, headers);
  await check(method, template, res);
  return res;
}
async function raw(p, template, headers = {}) {
  const ctl = new AbortController();
  const res = await fetch(origin + p, { headers, redirect: 'manual', signal: ctl.signal });
  let text = '';
  if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) ctl.abort();
  else text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  await check('get', template, { status: res.status, headers: res.headers, json, text });
  return res;
}

test('every operation answers with a documented status and a body its schema accepts', async () => {
  // Videos: one completed, one held in sampling (class slow), errors.
  const v = (await req('post', '/videos', '/v1/videos', 'submit', { prompt: 'a fox', seconds: '1' })).json;
  const slow = (await req('post', '/videos', '/v1/videos', 'submit', { prompt: 'slow', model: 'slow' })).json;
  await req('post', '/videos', '/v1/videos', 'submit', { prompt: 'x', size: '12x' });
  await req('post', '/videos', '/v1/videos', 'read', { prompt: 'x' });
  await req('post', '/videos', '/v1/videos', 'nobody', { prompt: 'x' });
  await req('post', '/videos', '/v1/videos', 'submit', { prompt: 'x' }, { 'Idempotency-Key': 'k' });
  await req('post', '/videos', '/v1/videos', 'submit', { prompt: 'y' }, { 'Idempotency-Key': 'k' });
  await req('post', '/videos', '/v1/videos', 'submit', { prompt: 'x'.repeat(2 << 20) });
  await until('video completed', async () => (await req('get', `/videos/${v.id}`, '/v1/videos/{id}', 'read')).json.status === 'completed');
  await req('get', '/videos?limit=2&order=asc', '/v1/videos', 'read');
  await req('get', '/videos?limit=0', '/v1/videos', 'read');
  await req('get', '/videos/video_none', '/v1/videos/{id}', 'read');
  for (const variant of ['video', 'thumbnail', 'spritesheet', 'gif'])
    await req('get', `/videos/${v.id}/content?variant=${variant}`, '/v1/videos/{id}/content', 'read');
  await req('get', `/videos/${v.id}/content`, '/v1/videos/{id}/content', 'read', undefined, { Range: 'bytes=0-9' });
  await req('get', `/videos/${slow.id}/content`, '/v1/videos/{id}/content', 'read');
  await raw(`/v1/videos/${v.id}/events`, '/v1/videos/{id}/events', { Authorization: `Bearer ${tok.read}` });
  await raw('/v1/videos/video_none/events', '/v1/videos/{id}/events', { Authorization: `Bearer ${tok.read}` });
  await req('post', `/videos/${slow.id}/cancel`, '/v1/videos/{id}/cancel', 'submit');
  await req('post', `/videos/${slow.id}/retry`, '/v1/videos/{id}/retry', 'submit');
  await req('post', `/videos/${v.id}/retry`, '/v1/videos/{id}/retry', 'submit');
  await req('post', `/videos/${v.id}/move`, '/v1/videos/{id}/move', 'submit', { position: 'first' });
  await req('post', `/videos/${v.id}/move`, '/v1/videos/{id}/move', 'submit', { position: 'last' });
  await req('delete', `/videos/${slow.id}`, '/v1/videos/{id}', 'submit');
  await req('delete', `/videos/${v.id}`, '/v1/videos/{id}', 'read');
  await req('delete', `/videos/${v.id}`, '/v1/videos/{id}', 'admin');
  await req('post', '/videos/video_none/cancel', '/v1/videos/{id}/cancel', 'submit');
  await req('get', '/models', '/v1/models', 'read');
  // Runs, receipts, the fleet.
  const r = (await req('post', '/runs', '/v1/runs', 'submit', '{"jobId": "a", "prompt": "p"}\n')).json;
  await req('post', '/runs', '/v1/runs', 'submit', '{"jobId": "a", "prompt": "p", "width": 3}\n');
  await req('post', `/runs?run_id=${r.id}`, '/v1/runs', 'submit', [{ jobId: 'a', prompt: 'other' }]);
  await until('run finished', async () => (await req('get', `/runs/${r.id}`, '/v1/runs/{id}', 'read')).json.finished);
  await req('get', '/runs?limit=3', '/v1/runs', 'read');
  await req('get', '/runs?limit=x', '/v1/runs', 'read');
  await req('get', '/runs/r-none', '/v1/runs/{id}', 'read');
  await req('post', `/runs/${r.id}/resume`, '/v1/runs/{id}/resume', 'submit');
  await req('post', `/runs/${r.id}/cancel`, '/v1/runs/{id}/cancel', 'submit');
  await req('post', '/runs/r-none/cancel', '/v1/runs/{id}/cancel', 'admin');
  await req('post', '/runs/r-none/resume', '/v1/runs/{id}/resume', 'admin');
  // Pause, unpause, move first (#39 item 4).
  await req('post', `/runs/${r.id}/pause`, '/v1/runs/{id}/pause', 'submit');
  await req('post', `/runs/${r.id}/pause`, '/v1/runs/{id}/pause', 'read');
  await req('post', `/runs/${r.id}/unpause`, '/v1/runs/{id}/unpause', 'submit');
  await req('post', '/runs/r-none/unpause', '/v1/runs/{id}/unpause', 'admin');
  await req('post', `/runs/${r.id}/jobs/a/move`, '/v1/runs/{id}/jobs/{job}/move', 'submit', { position: 'first' });
  await req('post', `/runs/${r.id}/jobs/zz/move`, '/v1/runs/{id}/jobs/{job}/move', 'admin', { position: 'first' });
  await req('post', `/runs/${r.id}/jobs/a/move`, '/v1/runs/{id}/jobs/{job}/move', 'submit', {});
  await raw(`/v1/runs/${r.id}/events`, '/v1/runs/{id}/events', { Authorization: `Bearer ${tok.read}` });
  await req('get', `/jobs/${r.id}:a/receipt`, '/v1/jobs/{id}/receipt', 'read');
  await req('get', `/jobs/${r.id}:b/receipt`, '/v1/jobs/{id}/receipt', 'read');
  await req('get', '/fleet', '/v1/fleet', 'read');
  // The run's measured and planned Gantt (#38 item 5): JSON, an SVG, a bad chart, no such run.
  await req('get', `/runs/${r.id}/gantt`, '/v1/runs/{id}/gantt', 'read');
  const svg = await req('get', `/runs/${r.id}/gantt?format=svg&chart=planned`, '/v1/runs/{id}/gantt', 'read');
  assert.match(svg.text, /<svg[^>]*>[\s\S]*class="bar"/);
  await req('get', `/runs/${r.id}/gantt?format=svg&chart=both`, '/v1/runs/{id}/gantt', 'read');
  await req('get', '/runs/r-none/gantt', '/v1/runs/{id}/gantt', 'read');
  // The console's.
  await req('get', '/me', '/v1/me', 'read');
  await req('get', '/pools/drained', '/v1/pools/drained', 'read');
  await req('post', '/pools/s1/drain', '/v1/pools/{pool}/drain', 'admin');
  await req('post', '/pools/s1/drain', '/v1/pools/{pool}/drain', 'submit');
  await req('post', '/pools/nope/drain', '/v1/pools/{pool}/drain', 'admin');
  await req('post', '/pools/s1/undrain', '/v1/pools/{pool}/undrain', 'admin');
  await raw('/', '/');
  await raw('/ui', '/ui');
  await raw('/ui/index.html', '/ui/{path}');
  await raw('/healthz', '/healthz');
  await raw('/readyz', '/readyz');
  // The rate limit's 429.
  const lim = stack.token('lim', 'read');
  assert.equal(stack.cli('token', 'limit', 'lim', '1').rc, 0);
  for (let i = 0; i < 3; i++) await req('get', '/fleet', '/v1/fleet', lim);
  assert.ok(seen.get('get /v1/fleet').has(429));
  // Every operation of the file was called and answered with a success it documents.
  const missing = [];
  for (const [p, item] of Object.entries(doc.paths))
    for (const m of METHODS) {
      if (!item[m]) continue;
      const got = [...(seen.get(`${m} ${p}`) ?? [])];
      if (!got.some((s) => s < 400)) missing.push(`${m} ${p} (${got.join(',') || 'not called'})`);
    }
  assert.deepEqual(missing, []);
  // And each error status the tests reached is one the file documents (checked above per call).
  const errors = new Set([...seen.values()].flatMap((s) => [...s]).filter((s) => s >= 400));
  for (const s of [400, 401, 403, 404, 409, 413, 429]) assert.ok(errors.has(s), `no call answered ${s}`);
});
