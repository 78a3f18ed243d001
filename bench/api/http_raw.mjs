// A minimal HTTP/1.1 keep-alive client (bench/api/requests.mjs): requests written as bytes,
// replies parsed by Content-Length, in order, the way bench/api/resp.mjs speaks RESP to Redis, so
// that the API's figures sit beside Redis's measured with the same kind of client (node:http's
// parser and its per-request objects cost the client, not the server).  A reply that says
// "Connection: close" (the server's max_requests_per_connection) sends the next request on a new
// connection; a request left unanswered on a closed one resolves 0 (counted failed).
import net from 'node:net';

export function httpRawClient(port) {
  let conn = null;
  const open = () => {
    const c = { sock: net.connect({ host: '127.0.0.1', port }), buf: Buffer.alloc(0), waiting: [] };
    c.sock.setNoDelay(true);
    c.sock.on('data', (d) => {
      c.buf = c.buf.length ? Buffer.concat([c.buf, d]) : d;
      for (;;) {
        const end = c.buf.indexOf('\r\n\r\n');
        if (end < 0) break;
        const head = c.buf.toString('latin1', 0, end);
        const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
        const len = m ? Number(m[1]) : 0;
        if (c.buf.length < end + 4 + len) break;
        c.buf = c.buf.subarray(end + 4 + len);
        if (/\r\nconnection:\s*close/i.test(head) && conn === c) conn = null;
        c.waiting.shift()?.(Number(head.slice(9, 12)));
      }
    });
    const fail = () => {
      if (conn === c) conn = null;
      while (c.waiting.length) c.waiting.shift()(0);
    };
    c.sock.on('error', fail);
    c.sock.on('close', fail);
    return c;
  };
  const call = (method, path, headers, body) => new Promise((resolve) => {
    if (!conn) conn = open();
    conn.waiting.push(resolve);
    const b = body ?? '';
    const h = Object.entries({ Host: `127.0.0.1:${port}`, ...headers, ...(body ? { 'Content-Length': Buffer.byteLength(b) } : {}) })
      .map(([k, v]) => `${k}: ${v}\r\n`).join('');
    conn.sock.write(`${method} ${path} HTTP/1.1\r\n${h}\r\n${b}`);
  });
  return { call, close: () => conn?.sock.destroy() };
}
