#!/usr/bin/python3
"""FakeComfyUiServer: a test double of ComfyUI's HTTP API, faithful to a real 0.3.64 server.

What h3pipe's comfyui runtime relies on, with the status codes and JSON shapes recorded in
../shared/comfyui/recorded-v0.3.64.json (comfyui_fake_conformance_test.py checks them):
- POST /prompt validates like execution.validate_prompt: unknown class, no output node, and per
  node (only those the outputs need) missing required input, bad INT/FLOAT, value not in list,
  min/max, LoadImage's missing file -> 400 {"error", "node_errors"} when no output node passes,
  else 200 with those node_errors and only the passing outputs queued (as ComfyUI does); a
  client-chosen `prompt_id` and `partial_execution_targets` are honoured; invalid JSON -> 500.
- One worker thread executes queued prompts in ComfyUI's order (ExecutionList with its
  output-first pick), only the nodes the output nodes need; outputs are cached by input
  signature (classic cache: only the last prompt's nodes survive), so an identical prompt runs
  nothing and its history lists the earlier file even if it was deleted since.
- /ws?clientId=ID (WebSocket, RFC 6455, as ComfyUI's server.py; fake_comfyui_ws.py): a `status`
  message on connect, feature_flags answered, then for each prompt queued with that client_id:
  execution_start, executing, `progress` {"value", "max", "prompt_id", "node"} per step of the run
  (--exec-steps over --exec-delay-ms, as main.py's progress hook sends them, with `progress_state`
  before each as 0.3.64 does and, with --preview-method latent2rgb, a binary preview frame per
  step), executed-free end: execution_success and executing {"node": null};
  execution_interrupted when interrupted.  Other clients get nothing.
- /history, /queue, /interrupt (targeted and global), /view (400/403/404), /upload/image
  (overwrite, duplicate detection), /object_info, /system_stats, /prompt GET, each also under
  /api; request bodies above --max-upload-bytes (ComfyUI's --max-upload-size, 100 MB) get 413.

Usage: fake_comfyui_server.py --root DIR [--port N] [--latent F] [--conditioning F] [--mp4 F]
         [--mode ok|fail|forget] [--exec-delay-ms N] [--exec-steps N] [--max-upload-bytes N] [--packs seeds]
         [--record FILE] [--exec-python-nodes h3pipe_nodes,h3_standins]
         [--preview-method none|latent2rgb --preview-jpeg F] [--preview-huge-bytes N]
         [--ignore-feature-flags]
--exec-python-nodes: those node classes run for real in Python (fake_comfyui_pynodes.py: h3pipe's
node pack and weight-free stand-ins for a MiniMax H3 workflow's core classes); without it every
node is symbolic (fake_comfyui_nodes.py).
Prints "PORT <n>" once listening on 127.0.0.1 (port 0 = chosen by the OS). --record appends one
JSON line per request that changes state ({"kind", "body", "status"}). Standard library only.
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_comfyui_nodes import ExecutionError, Interrupted, NodeSet  # noqa: E402
from fake_comfyui_validate import validate_prompt  # noqa: E402
from fake_comfyui_ws import WebSocketSide  # noqa: E402

SYSTEM_STATS = {
    "system": {"os": "posix", "ram_total": 25276059648, "ram_free": 23968051200,
               "comfyui_version": "0.3.64", "required_frontend_version": "1.27.10",
               "installed_templates_version": None, "required_templates_version": "0.1.95",
               "python_version": sys.version, "pytorch_version": "fake", "embedded_python": False,
               "argv": ["main.py", "--cpu", "--listen", "127.0.0.1", "--port", "0", "--disable-api-nodes",
                        "--front-end-root", "NONE", "--base-directory", "ROOT", "--database-url",
                        "sqlite:///:memory:"]},
    "devices": [{"name": "cpu", "type": "cpu", "index": None, "vram_total": 25276059648,
                 "vram_free": 23968051200, "torch_vram_total": 25276059648,
                 "torch_vram_free": 23968051200}]}


def now_ms():
    return int(time.time() * 1000)


class FakeComfyUiServer(WebSocketSide):
    def __init__(self, args):
        self.args = args
        self.root = os.path.abspath(args.root)
        self.dirs = {t: os.path.join(self.root, t) for t in ("input", "output", "temp")}
        for d in list(self.dirs.values()) + [os.path.join(self.root, "models")]:
            os.makedirs(d, exist_ok=True)
        fixtures = {"latent": args.latent, "conditioning": args.conditioning, "mp4": args.mp4}
        if args.exec_python_nodes:
            from fake_comfyui_pynodes import PyNodeSet
            self.nodes = PyNodeSet(self.root, fixtures, packs=args.packs.split(","),
                                   modules=args.exec_python_nodes.split(","))
        else:
            self.nodes = NodeSet(self.root, fixtures, packs=args.packs.split(","))
        self.lock = threading.Condition()
        self.queue = []          # [number, prompt_id, prompt, extra_data, outputs_to_execute]
        self.running = None
        self.history = {}        # insertion-ordered, as ComfyUI's
        self.number = 0
        self.interrupt_flag = False
        self.cache = {}          # node signature -> (outputs, ui)
        self.init_websockets()   # /ws: fake_comfyui_ws.py
        threading.Thread(target=self.worker, daemon=True).start()

    def record(self, kind, body, status=200):
        if self.args.record:
            with self.lock, open(self.args.record, "a") as f:
                f.write(json.dumps({"kind": kind, "body": body, "status": status}) + "\n")

    # ---- POST /prompt ----------------------------------------------------------------------
    def submit(self, body):
        if "prompt" not in body:
            out = {"error": {"type": "no_prompt", "message": "No prompt provided",
                             "details": "No prompt provided", "extra_info": {}}, "node_errors": {}}
            self.record("prompt", body, 400)
            return 400, out
        prompt = body["prompt"]
        prompt_id = str(body.get("prompt_id", uuid.uuid4()))
        partial = body.get("partial_execution_targets")
        with self.lock:
            number = body.get("number", self.number)
            self.number += 1
        ok, error, outputs, node_errors = validate_prompt(self.nodes, prompt, partial)
        if not ok:
            self.record("prompt", body, 400)
            return 400, {"error": error, "node_errors": node_errors}
        extra = dict(body.get("extra_data", {}))
        if "client_id" in body:
            extra["client_id"] = body["client_id"]
        self.record("prompt", body, 200)
        if self.args.mode != "forget":
            with self.lock:
                self.queue.append([number, prompt_id, prompt, extra, outputs])
                self.queue.sort(key=lambda q: q[0])
                self.lock.notify_all()
        return 200, {"prompt_id": prompt_id, "number": number, "node_errors": node_errors}

    # ---- the prompt worker -----------------------------------------------------------------
    def worker(self):
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                item = self.queue.pop(0)
                self.running = item
                self.interrupt_flag = False
            status, outputs, meta = self.execute(item)
            with self.lock:
                self.history[item[1]] = {"prompt": item, "outputs": outputs, "status": status, "meta": meta}
                self.running = None

    def check_interrupt(self, node_id, cls):
        with self.lock:
            if self.interrupt_flag:
                raise Interrupted(node_id, cls)

    def signature(self, prompt, node_id, memo):
        if node_id not in memo:
            node = prompt[node_id]
            sig = [node["class_type"], self.nodes.is_changed(node["class_type"], node["inputs"])]
            for key in sorted(node["inputs"]):
                v = node["inputs"][key]
                if isinstance(v, list) and len(v) == 2 and v[0] in prompt:
                    sig.append([key, self.signature(prompt, v[0], memo), v[1]])
                else:
                    sig.append([key, v])
            memo[node_id] = json.dumps(sig, sort_keys=True)
        return memo[node_id]

    def order(self, prompt, outputs):
        """ComfyUI's ExecutionList: dissolve the needed subgraph, output nodes first."""
        pending, blocking, block_count = {}, {}, {}
        stack = list(reversed(outputs))
        links = []
        while stack:
            nid = stack.pop()
            if nid in pending:
                continue
            pending[nid] = True
            blocking.setdefault(nid, set())
            block_count[nid] = 0
            for v in prompt[nid]["inputs"].values():
                if isinstance(v, list) and len(v) == 2 and v[0] in prompt:
                    stack.append(v[0])
                    links.append((v[0], nid))
        for src, dst in links:
            if dst not in blocking[src]:
                blocking[src].add(dst)
                block_count[dst] += 1
        is_out = lambda n: self.nodes.output_node(prompt[n]["class_type"])  # noqa: E731
        order = []
        while pending:
            ready = [n for n in pending if block_count[n] == 0]
            pick = next((n for n in ready if is_out(n)), None) \
                or next((n for n in ready if any(is_out(b) for b in blocking[n])), None) \
                or next((n for n in ready if any(is_out(c) for b in blocking[n] for c in blocking[b])), None) \
                or ready[0]
            order.append(pick)
            del pending[pick]
            for b in blocking[pick]:
                block_count[b] -= 1
        return order

    def execute(self, item):
        number, prompt_id, prompt, extra, outputs = item
        client = extra.get("client_id")
        self.ws_send(client, "execution_start", {"prompt_id": prompt_id, "timestamp": now_ms()})
        messages = [["execution_start", {"prompt_id": prompt_id, "timestamp": now_ms()}]]
        memo = {}
        sigs = {nid: self.signature(prompt, nid, memo) for nid in prompt}
        self.cache = {s: v for s, v in self.cache.items() if s in sigs.values()}
        cached = [nid for nid in prompt if sigs[nid] in self.cache]
        messages.append(["execution_cached", {"nodes": cached, "prompt_id": prompt_id, "timestamp": now_ms()}])
        values, ui, executed, delayed = {}, {}, [], False
        self.current_prompt, self.current_extra = prompt, extra  # hidden PROMPT / EXTRA_PNGINFO
        try:
            for nid in self.order(prompt, outputs):
                cls = prompt[nid]["class_type"]
                if sigs[nid] in self.cache:
                    values[nid], node_ui = self.cache[sigs[nid]]
                else:
                    self.ws_send(client, "executing", {"node": nid, "display_node": nid, "prompt_id": prompt_id})
                    if not delayed:
                        delayed = True
                        start = time.monotonic()
                        end = start + self.args.exec_delay_ms / 1000.0
                        steps, told = max(1, self.args.exec_steps), 0
                        while time.monotonic() < end:
                            self.check_interrupt(nid, cls)
                            time.sleep(0.01)
                            done = min(steps, int((time.monotonic() - start) * 1000 * steps / max(1, self.args.exec_delay_ms)))
                            while told < done:  # the progress hook, once per sampler step
                                told += 1
                                self.step(client, prompt_id, nid, told, steps)
                        while told < steps:
                            told += 1
                            self.step(client, prompt_id, nid, told, steps)
                    self.check_interrupt(nid, cls)
                    if self.args.mode == "fail" and self.nodes.output_node(cls):
                        raise ExecutionError(nid, cls, "torch.OutOfMemoryError",
                                             "Allocation on device 0 would exceed allowed memory. (out of memory)\n")
                    inputs = {k: (values[v[0]][v[1]] if isinstance(v, list) and len(v) == 2 and v[0] in values else v)
                              for k, v in prompt[nid]["inputs"].items()}
                    values[nid], node_ui = self.nodes.run(self, nid, cls, inputs)
                    self.cache[sigs[nid]] = (values[nid], node_ui)
                    executed.append(nid)
                if node_ui is not None:
                    ui[nid] = node_ui
            messages.append(["execution_success", {"prompt_id": prompt_id, "timestamp": now_ms()}])
            status = {"status_str": "success", "completed": True, "messages": messages}
            self.ws_send(client, "execution_success", {"prompt_id": prompt_id, "timestamp": now_ms()})
            self.ws_send(client, "executing", {"node": None, "display_node": None, "prompt_id": prompt_id})
        except Interrupted as e:
            messages.append(["execution_interrupted", {"prompt_id": prompt_id, "node_id": e.node_id,
                                                       "node_type": e.node_type, "executed": executed,
                                                       "timestamp": now_ms()}])
            status = {"status_str": "error", "completed": False, "messages": messages}
            self.ws_send(client, "execution_interrupted", messages[-1][1])
        except ExecutionError as e:
            messages.append(["execution_error", {
                "prompt_id": prompt_id, "node_id": e.node_id, "node_type": e.node_type, "executed": executed,
                "exception_message": str(e), "exception_type": e.exc_type,
                "traceback": ["  File \"execution.py\", line 1, in execute\n"],
                "current_inputs": e.inputs, "current_outputs": list(reversed(list(prompt))),
                "timestamp": now_ms()}])
            status = {"status_str": "error", "completed": False, "messages": messages}
        if status["status_str"] != "success":
            ui = {}
        meta = {k: {"node_id": k, "display_node": k, "parent_node": None, "real_node_id": k} for k in ui}
        return status, ui, meta

    # ---- other endpoints -------------------------------------------------------------------
    def queue_info(self):
        with self.lock:
            return {"queue_running": [self.running] if self.running else [], "queue_pending": list(self.queue)}

    def history_of(self, prompt_id=None, max_items=None):
        with self.lock:
            if prompt_id is not None:
                return {prompt_id: self.history[prompt_id]} if prompt_id in self.history else {}
            items = list(self.history.items())
            if max_items is not None:
                items = items[max(0, len(items) - max_items):]
            return dict(items)

    def post_queue(self, body):
        self.record("queue", body)
        with self.lock:
            if body.get("clear"):
                self.queue = []
            for pid in body.get("delete", []):
                self.queue = [q for q in self.queue if q[1] != pid]

    def post_history(self, body):
        self.record("history", body)
        with self.lock:
            if body.get("clear"):
                self.history = {}
            for pid in body.get("delete", []):
                self.history.pop(pid, None)

    def interrupt(self, body):
        self.record("interrupt", body)
        with self.lock:
            pid = body.get("prompt_id")
            if not pid or (self.running and self.running[1] == pid):
                self.interrupt_flag = True

    def upload(self, fields):
        image = fields.get("image")
        if not image or not image[0]:
            return 400, None
        filename, data = image
        overwrite = fields.get("overwrite", (None, b""))[1].decode()
        kind = fields.get("type", (None, b"input"))[1].decode() or "input"
        if kind not in self.dirs:
            kind = "input"
        subfolder = fields.get("subfolder", (None, b""))[1].decode()
        base = self.dirs[kind]
        folder = os.path.join(base, os.path.normpath(subfolder))
        path = os.path.abspath(os.path.join(folder, filename))
        if os.path.commonpath((base, path)) != base:
            return 400, None
        os.makedirs(folder, exist_ok=True)
        if overwrite not in ("true", "1"):
            stem, ext = os.path.splitext(filename)
            i = 1
            while os.path.exists(path):
                with open(path, "rb") as f:
                    if f.read() == data:
                        break
                filename = f"{stem} ({i}){ext}"
                path = os.path.join(folder, filename)
                i += 1
        with open(path, "wb") as f:
            f.write(data)
        self.record("upload", {"name": filename, "subfolder": subfolder, "type": kind, "bytes": len(data)})
        return 200, {"name": filename, "subfolder": subfolder, "type": kind}

    def view(self, query):
        """(status, path or None) as server.py's view_image."""
        if "filename" not in query:
            return 404, None
        filename = query["filename"][0]
        if not filename:
            return 400, None
        if filename[0] == "/" or ".." in filename:
            return 400, None
        base = self.dirs.get(query.get("type", ["output"])[0])
        if base is None:
            return 400, None
        if "subfolder" in query:
            full = os.path.join(base, query["subfolder"][0])
            if os.path.commonpath((os.path.abspath(full), base)) != base:
                return 403, None
            base = full
        path = os.path.join(base, os.path.basename(filename))
        return (200, path) if os.path.isfile(path) else (404, None)


def parse_multipart(content_type, body):
    """{name: (filename or None, bytes)} from a multipart/form-data body."""
    boundary = None
    for piece in content_type.split(";"):
        piece = piece.strip()
        if piece.startswith("boundary="):
            boundary = piece[len("boundary="):].strip('"')
    if not boundary:
        return {}
    fields = {}
    for part in body.split(b"--" + boundary.encode()):
        if part in (b"", b"--", b"--\r\n") or b"\r\n\r\n" not in part:
            continue
        head, _, data = part.lstrip(b"\r\n").partition(b"\r\n\r\n")
        if data.endswith(b"\r\n"):
            data = data[:-2]
        name, filename = None, None
        for line in head.decode("utf-8", "replace").split("\r\n"):
            if line.lower().startswith("content-disposition:"):
                for attr in line.split(";")[1:]:
                    key, _, value = attr.strip().partition("=")
                    value = value.strip('"')
                    if key == "name":
                        name = value
                    elif key == "filename":
                        filename = value
        if name:
            fields[name] = (filename, data)
    return fields


JSON = "application/json; charset=utf-8"
EMPTY = "application/octet-stream"  # aiohttp's web.Response() without a body


def make_handler(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def reply(self, status, body=None, raw=b"", ctype=JSON):
            data = json.dumps(body).encode() if body is not None else raw
            if body is None and ctype == JSON:
                ctype = EMPTY
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def route(self):
            url = urlparse(self.path)
            path = url.path[4:] if url.path.startswith("/api/") else url.path
            return path, parse_qs(url.query, keep_blank_values=True)

        def do_GET(self):
            path, query = self.route()
            if path == "/ws":
                return server.serve_websocket(self, query)
            if path == "/queue":
                return self.reply(200, server.queue_info())
            if path == "/history":
                mi = query.get("max_items", [None])[0]
                return self.reply(200, server.history_of(max_items=int(mi) if mi else None))
            if path.startswith("/history/"):
                return self.reply(200, server.history_of(path[len("/history/"):]))
            if path == "/view":
                status, file = server.view(query)
                if not file:
                    return self.reply(status)
                with open(file, "rb") as f:
                    data = f.read()
                ctype = "image/png" if file.endswith(".png") else "video/mp4" if file.endswith(".mp4") else EMPTY
                return self.reply(200, raw=data, ctype=ctype)
            if path == "/system_stats":
                return self.reply(200, SYSTEM_STATS)
            if path == "/object_info":
                return self.reply(200, {c: server.nodes.spec(c) for c in server.nodes.names()})
            if path.startswith("/object_info/"):
                cls = path[len("/object_info/"):]
                return self.reply(200, {cls: server.nodes.spec(cls)} if server.nodes.has(cls) else {})
            if path == "/prompt":
                with server.lock:
                    remaining = len(server.queue) + (1 if server.running else 0)
                return self.reply(200, {"exec_info": {"queue_remaining": remaining}})
            return self.reply(404, raw=b"404: Not Found", ctype="text/plain; charset=utf-8")

        def do_POST(self):
            path, _ = self.route()
            n = int(self.headers.get("Content-Length", 0))
            body = self.rfile.read(n) if n else b""
            if n > server.args.max_upload_bytes:
                server.record("too_large", {"path": path, "bytes": n}, 413)
                msg = f"Maximum request body size {server.args.max_upload_bytes} exceeded, actual body size {n}"
                return self.reply(413, raw=msg.encode(), ctype="text/plain; charset=utf-8")
            if path == "/upload/image":
                status, out = server.upload(parse_multipart(self.headers.get("Content-Type", ""), body))
                return self.reply(status, out)
            try:
                data = json.loads(body) if body else None
            except ValueError:
                data = False
            if path == "/interrupt":
                server.interrupt(data if isinstance(data, dict) else {})
                return self.reply(200)
            if not isinstance(data, dict):
                return self.reply(500, raw=b"500 Internal Server Error\n\nServer got itself in trouble",
                                  ctype="text/plain; charset=utf-8")
            if path == "/prompt":
                status, out = server.submit(data)
                return self.reply(status, out)
            if path == "/queue":
                server.post_queue(data)
                return self.reply(200)
            if path == "/history":
                server.post_history(data)
                return self.reply(200)
            return self.reply(404, raw=b"404: Not Found", ctype="text/plain; charset=utf-8")

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latent")
    p.add_argument("--conditioning")
    p.add_argument("--mp4")
    p.add_argument("--mode", choices=["ok", "fail", "forget"], default="ok")
    p.add_argument("--exec-delay-ms", type=int, default=0)
    p.add_argument("--exec-steps", type=int, default=8,
                   help="progress messages (sampler steps) spread over --exec-delay-ms")
    p.add_argument("--max-upload-bytes", type=int, default=100 * 1024 * 1024)
    p.add_argument("--packs", default="", help="extra custom node packs: seeds")
    p.add_argument("--record")
    p.add_argument("--preview-method", choices=["none", "latent2rgb"], default="none",
                   help="as ComfyUI's flag: latent2rgb sends a preview frame per step (fake_comfyui_ws.py)")
    p.add_argument("--preview-jpeg", help="the JPEG each preview frame carries")
    p.add_argument("--preview-huge-bytes", type=int, default=0, help="one extra frame of this size at step 1")
    p.add_argument("--ignore-feature-flags", action="store_true", help="as a server before 0.3.44")
    p.add_argument("--exec-python-nodes", default="", help="run these node modules for real: "
                   "h3pipe_nodes, h3_standins")
    args = p.parse_args()
    fake = FakeComfyUiServer(args)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(fake))
    httpd.daemon_threads = True
    print(f"PORT {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
