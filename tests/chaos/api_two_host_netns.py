#!/usr/bin/python3
"""h3pipe-api on two hosts (issue #37 item 8, "content is served whichever host decoded it").

chaos.py's two network namespaces: host a (namespace A) runs Redis, the encoder and a sampler;
host b (namespace B) the decoder, whose disk alone holds the MP4s.  Each host's `h3pipe start`
starts its h3pipe-api (the binary is built beside the others): a's on loopback (the default),
b's on b's address (hosts[b].api_bind), each announcing its URL in Redis (h3pipe:api:hosts).
A video created through a's API is decoded on b; then, from namespace A:
  * `status --json` on each host names that host's API (api_url);
  * GET /v1/videos/{id}/content from a's API (which lacks the file) and from b's API give the
    same bytes as the MP4 on b's disk, a's read from b's in 2 KiB Range reads
    (H3PIPE_API_PEER_CHUNK_BYTES); a Range request across two of those reads through a's API gives
    206 and the slice;
  * the official openai SDK's downloadContent through a's API gives the same bytes (when the SDK
    is installed in tests/api; else said and not checked);
  * a's API asking b on a dead URL answers 503 `peer_unavailable` naming host b; a request marked
    as forwarded by a peer is never forwarded again (404);
  * each API counts the content requests in h3pipe_api_requests_total on its metrics port.
The last line is one JSON object.

Usage: api_two_host_netns.py --bin BUILD/bin
Exit status: 0 pass, 1 fail, 77 skipped (not root / no namespaces / no h3pipe-api), 2 set-up error.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402

SRC = chaos.SRC
CHUNK = 2048  # H3PIPE_API_PEER_CHUNK_BYTES of both APIs


class TwoApis(chaos.Chaos):
    def pool_list(self, prof):
        return [
            {"name": "enc", "host": "a", "stage": "encode", "profiles": prof(0.05)},
            {"name": "s0", "host": "a", "stage": "sample", "profiles": prof(0.1)},
            {"name": "dec", "host": "b", "stage": "decode", "profiles": prof(0.05)},
        ]

    def adjust_config(self, cfg, keys):
        cfg["hosts"][1]["api_bind"] = self.a.ip_b  # b's API reachable from a; a's stays loopback

    def env(self, host):
        e = super().env(host)
        # Small chunks, so the small test video crosses several Range reads through the peer.
        e["H3PIPE_API_PEER_CHUNK_BYTES"] = str(CHUNK)
        return e

    def cli(self, argv, host):
        cmd = [self.h3, "--config", self.config] + argv
        if host == "b":
            cmd = ["ip", "netns", "exec", self.a.ns_b] + cmd
        r = subprocess.run(cmd, env=self.env(host), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.returncode, r.stdout, r.stderr

    def run_file(self, host):
        return json.load(open(os.path.join(self.state[host], "run", "api-%s.json" % host)))


def http(method, url, token=None, body=None, headers=None, timeout=30):
    """(status, headers, body bytes); an HTTP error status is returned, not raised."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, headers=h, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def sdk_download(base, token, vid, out):
    """The openai SDK's downloadContent through `base`: (ran, detail)."""
    api_dir = os.path.join(SRC, "tests", "api")
    if not os.path.isdir(os.path.join(api_dir, "node_modules", "openai")) or not shutil.which("node"):
        return False, "the openai SDK is not installed in tests/api (scripts/setup.sh)"
    script = (
        "import OpenAI from 'openai'; import fs from 'node:fs';"
        "const c = new OpenAI({apiKey: process.env.T, baseURL: process.env.B});"
        "const r = await c.videos.downloadContent(process.env.V);"
        "fs.writeFileSync(process.env.O, Buffer.from(await r.arrayBuffer()));")
    env = dict(os.environ, T=token, B=base, V=vid, O=out)
    r = subprocess.run(["node", "--input-type=module", "-e", script], cwd=api_dir, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return True, "exit %d %s" % (r.returncode, r.stdout.strip()[-400:])


def metric(url, route, status):
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
    except OSError:
        return None
    want = 'h3pipe_api_requests_total{method="GET",route="%s",status="%s"} ' % (route, status)
    for line in text.splitlines():
        if line.startswith(want):
            return float(line[len(want):])
    return 0.0


def inner(a):
    if not os.path.exists(os.path.join(os.path.abspath(a.bin), "h3pipe-api")):
        chaos.log("SKIP: h3pipe-api is not built in %s" % a.bin)
        return chaos.SKIP
    c = TwoApis(a)
    try:
        c.setup()
    except Exception as e:
        chaos.log("set-up failed: %s" % e)
        c.stop()
        return 2
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            chaos.log("FAIL: " + what)
        return ok

    out = {}
    try:
        # Both APIs up (start waits for /readyz) and announced.
        urls = {}
        for host in ("a", "b"):
            rc, so, se = c.cli(["status", "--json"], host)
            check(rc == 0, "status --json on %s: exit %d: %s" % (host, rc, se.strip()))
            urls[host] = c.run_file(host)["api_url"]
        rc, so, se = c.cli(["status"], "a")
        check(("api  %s" % urls["a"]) in so, "plain status on a does not print its API: %r" % so[-300:])
        check(urls["a"].startswith("http://127.0.0.1:"), "a's API is not on loopback: %s" % urls["a"])
        check(urls["b"].startswith("http://%s:" % a.ip_b), "b's API is not on b's address: %s" % urls["b"])
        out["api_urls"] = urls
        deadline = time.time() + 30
        announced = {}
        while time.time() < deadline:
            h = c.r.cmd("HGETALL", "h3pipe:api:hosts") or []
            announced = {chaos.s(h[i]): json.loads(chaos.s(h[i + 1]))["url"] for i in range(0, len(h), 2)}
            if announced == urls:
                break
            time.sleep(0.2)
        check(announced == urls, "h3pipe:api:hosts %s, expected %s" % (announced, urls))

        rc, so, se = c.cli(["token", "create", "deploy-e2e", "--role", "submit"], "a")
        if not check(rc == 0, "token create: exit %d: %s" % (rc, se.strip())):
            return 1
        token = so.strip().splitlines()[-1]

        st, _, body = http("POST", urls["a"] + "/videos", token,
                           {"prompt": "two hosts", "size": "64x64", "frames": "9", "fps": "12"})
        if not check(st == 200, "POST /v1/videos on a: %d %s" % (st, body[:300])):
            return 1
        vid = json.loads(body)["id"]
        run = json.loads(body)["run_id"]
        deadline, status = time.time() + a.stall_s + 30, None
        while time.time() < deadline:
            st, _, body = http("GET", urls["a"] + "/videos/" + vid, token)
            status = json.loads(body).get("status") if st == 200 else None
            if status in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.2)
        if not check(status == "completed", "video %s ended %s" % (vid, status)):
            return 1
        for host in ("a", "b"):
            rc, so, se = c.cli(["status", run, "--json"], host)
            try:
                got_url = json.loads(so).get("api_url")
            except ValueError:
                got_url = None
            check(rc == 0 and got_url == urls[host],
                  "status %s --json on %s: api_url %r, expected %s (%s)" % (run, host, got_url, urls[host], se.strip()))
        mp4s = [os.path.join(c.state["b"], "outputs", run, f)
                for f in os.listdir(os.path.join(c.state["b"], "outputs", run)) if f.endswith(".mp4")]
        check(len(mp4s) == 1, "b's output root holds %s" % mp4s)
        check(not os.path.isdir(os.path.join(c.state["a"], "outputs", run)),
              "a's output root holds the run too: the proxy would not be tested")
        want = open(mp4s[0], "rb").read()
        out["mp4_bytes"] = len(want)

        got = {}
        for host in ("a", "b"):
            st, hdr, body = http("GET", urls[host] + "/videos/%s/content" % vid, token)
            got[host] = body
            check(st == 200 and body == want,
                  "content from %s's API: %d, %d bytes, same as b's MP4: %s" % (host, st, len(body), body == want))
            check(hdr.get("Content-Type", "").startswith("video/mp4"), "content from %s: type %s" % (host, hdr.get("Content-Type")))
        check(len(want) > 2 * CHUNK, "the MP4 (%d bytes) spans more than two %d-byte reads" % (len(want), CHUNK))
        # A Range across a chunk boundary of the peer reads.
        lo, hi = CHUNK - 100, 2 * CHUNK + 99
        st, hdr, body = http("GET", urls["a"] + "/videos/%s/content" % vid, token, headers={"Range": "bytes=%d-%d" % (lo, hi)})
        check(st == 206 and body == want[lo:hi + 1],
              "Range through a's API: %d, %d bytes, right slice %s" % (st, len(body), body == want[lo:hi + 1]))
        check(hdr.get("Content-Range") == "bytes %d-%d/%d" % (lo, hi, len(want)), "Content-Range %s" % hdr.get("Content-Range"))
        st, _, body = http("GET", urls["a"] + "/videos/%s/content" % vid, "nope-not-a-token")
        check(st == 401, "an unknown token through a's API: %d (expected 401)" % st)

        sdk_out = os.path.join(c.work, "sdk.mp4")
        ran, detail = sdk_download(urls["a"], token, vid, sdk_out)
        if ran:
            check(os.path.exists(sdk_out) and open(sdk_out, "rb").read() == want,
                  "the openai SDK's downloadContent through a's API: %s" % detail)
        out["sdk"] = "checked" if ran else detail

        # A forwarded request is answered from the receiver's own disk only: no second hop.
        st, _, body = http("GET", urls["a"] + "/videos/%s/content" % vid, token, headers={"X-H3pipe-Forwarded-By": "b"})
        check(st == 404, "a forwarded request to a: %d (expected 404, no second hop)" % st)
        # b's API announced on a dead port: a's answer names host b and says retry (503).
        c.r.cmd("HSET", "h3pipe:api:hosts", "b", json.dumps({"url": "http://%s:1/v1" % a.ip_b, "at_ms": 0}))
        st, hdr, body = http("GET", urls["a"] + "/videos/%s/content" % vid, token)
        err = json.loads(body).get("error", {}) if body.startswith(b"{") else {}
        check(st == 503 and err.get("code") == "peer_unavailable" and '"b"' in err.get("message", ""),
              "content with b's API unreachable: %d %s" % (st, body[:300]))
        # ... until b's API announces itself again (every 10 s).
        deadline = time.time() + 20
        while time.time() < deadline:
            st, _, body = http("GET", urls["a"] + "/videos/%s/content" % vid, token)
            if st == 200:
                break
            time.sleep(0.5)
        check(st == 200 and body == want, "content through a once b re-announced: %d" % st)

        for host, ip in (("a", a.ip_a), ("b", a.ip_b)):  # on the host's bind address
            m = "http://%s:%d/metrics" % (ip, c.run_file(host)["metrics_port"])
            n = metric(m, "/v1/videos/{id}/content", 200)
            check(n is not None and n >= 1, "h3pipe_api_requests_total of content 200 on %s's API (%s): %s" % (host, m, n))
            if host == "b":
                # a's whole reads went to b in CHUNK-byte Range requests (206 each), a probe first.
                reads = metric(m, "/v1/videos/{id}/content", 206)
                least = 3 * ((len(want) + CHUNK - 1) // CHUNK + 1)  # three whole reads through a
                check(reads is not None and reads >= least,
                      "b answered %s Range reads of content, expected at least %d" % (reads, least))
                out["peer_range_reads"] = reads
        out["pass"] = not failures
        out["failures"] = failures
        chaos.log(json.dumps(out))
        return 0 if not failures else 1
    finally:
        c.stop()
        if not a.keep and not failures and os.path.isdir(c.work):
            shutil.rmtree(c.work, ignore_errors=True)


def main():
    def args(p):
        p.add_argument("--jobs", type=int, default=1)

    return chaos.netns_main(__doc__, __file__, inner, args)


if __name__ == "__main__":
    sys.exit(main())
