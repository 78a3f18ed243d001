// A minimal RESP client over the socket of REDIS_HOST (a path) or REDIS_HOST:REDIS_PORT, and the
// percentiles the API benchmarks print (bench/api/events.mjs, bench/api/requests.mjs).
import net from 'node:net';

const env = process.env;

export function parse(buf, at) {
  if (at >= buf.length) return null;
  const eol = buf.indexOf('\r\n', at);
  if (eol < 0) return null;
  const t = String.fromCharCode(buf[at]), line = buf.toString('latin1', at + 1, eol);
  if (t === '+' || t === '-') return [t === '-' ? new Error(line) : line, eol + 2];
  if (t === ':') return [Number(line), eol + 2];
  if (t === '$') {
    const n = Number(line);
    if (n < 0) return [null, eol + 2];
    if (buf.length < eol + 2 + n + 2) return null;
    return [buf.toString('utf8', eol + 2, eol + 2 + n), eol + 2 + n + 2];
  }
  if (t === '*') {
    const n = Number(line);
    if (n < 0) return [null, eol + 2];
    const out = [];
    let p = eol + 2;
    for (let i = 0; i < n; ++i) {
      const r = parse(buf, p);
      if (!r) return null;
      out.push(r[0]);
      p = r[1];
    }
    return [out, p];
  }
  throw new Error(`RESP: unexpected ${t}`);
}
export function redisClient() {
  const sock = env.REDIS_HOST.startsWith('/') ? net.connect({ path: env.REDIS_HOST }) : net.connect({ host: env.REDIS_HOST, port: Number(env.REDIS_PORT) });
  let buf = Buffer.alloc(0);
  const waiting = [];
  sock.on('data', (d) => {
    buf = buf.length ? Buffer.concat([buf, d]) : d;
    for (;;) {
      const r = parse(buf, 0);
      if (!r) break;
      buf = buf.subarray(r[1]);
      const w = waiting.shift();
      if (r[0] instanceof Error) w.reject(r[0]); else w.resolve(r[0]);
    }
  });
  const call = (...args) => new Promise((resolve, reject) => {
    waiting.push({ resolve, reject });
    sock.write(`*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join(''));
  });
  return { call, close: () => sock.destroy() };
}

export function stats(delays, expected) {
  const s = [...delays].sort((a, b) => a - b);
  const q = (p) => Number((s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN).toFixed(2));
  return { delivered: s.length, expected, p50_ms: q(0.5), p99_ms: q(0.99), max_ms: q(1) };
}

