#!/usr/bin/python3
"""A stand-in for h3pipe-encoder/-sampler/-decoder in tests/supervisor (supervisor_test.cpp).

It does what the supervisor relies on from a service: writes <state>/run/<name>.json (pid, bind,
health_port, metrics_port) and answers GET /readyz; binds the --metrics-port it is given and
exits 98 when that port is taken (as common/runner/runner.cpp does).  What it should do instead
is read from $H3_FAKE_CTRL/mode-<name> at each start ("exit N": exit at once; "never-ready":
/readyz 503).  Every start and SIGTERM is appended to $H3_FAKE_CTRL/events as a JSON line
(CLOCK_MONOTONIC time, pid, argv; on SIGTERM whether Redis still accepted connections).
"""
import http.server
import json
import os
import signal
import socket
import sys
import time


def arg(flag):
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else ""


SERVICE = os.path.basename(sys.argv[0]).removeprefix("h3pipe-")
NAME = f"{SERVICE}-{arg('--pool') or arg('--host')}"
CTRL = os.environ["H3_FAKE_CTRL"]
STATE = arg("--state-dir")


def event(what, **more):
    line = {"t": time.monotonic(), "name": NAME, "pid": os.getpid(), "what": what,
            "argv": sys.argv[1:], **more}
    with open(os.path.join(CTRL, "events"), "a") as f:
        f.write(json.dumps(line) + "\n")


def mode():
    try:
        with open(os.path.join(CTRL, "mode-" + NAME)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return "ok"


def redis_accepts():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(os.path.join(STATE, "redis", "redis.sock"))
        return True
    except OSError:
        return False
    finally:
        s.close()


def on_term(_sig, _frame):
    event("term", redis_up=redis_accepts())
    os._exit(0)


event("start")
MODE = mode()
if MODE.startswith("exit "):
    sys.exit(int(MODE.split()[1]))
signal.signal(signal.SIGTERM, on_term)

metrics = socket.socket()
try:
    metrics.bind(("127.0.0.1", int(arg("--metrics-port") or 0)))
except OSError:
    event("metrics port taken")
    sys.exit(98)
metrics.listen()


class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/readyz" and MODE != "never-ready"
        self.send_response(200 if ok else 503)
        self.end_headers()
        self.wfile.write(b"ready\n" if ok else b"not ready\n")

    def log_message(self, *_):
        pass


server = http.server.HTTPServer(("127.0.0.1", 0), Ready)
run = os.path.join(STATE, "run", NAME + ".json")
with open(run + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "bind": "127.0.0.1", "health_port": server.server_port,
               "metrics_port": metrics.getsockname()[1]}, f)
os.rename(run + ".tmp", run)
server.serve_forever()
