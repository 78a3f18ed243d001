#!/usr/bin/python3
"""FakeComfyUiServer: a stand-in for ComfyUI's HTTP API, for h3pipe's comfyui runtime tests.

It speaks the endpoints of ComfyUI's server.py that h3pipe uses, with the same JSON shapes:
POST /prompt, GET /history[/{id}], POST /history, GET /queue, POST /queue, POST /interrupt,
GET /view, POST /upload/image, GET /system_stats (each also under /api).  One worker thread
"executes" queued prompts in order, as ComfyUI's prompt worker does: nodes whose class is in
NODES run (loaders check that their input files exist, save nodes write an output file of the
right kind), other known classes pass through, unknown classes are rejected at POST /prompt.

Usage: fake_comfyui_server.py --root DIR [--latent FILE] [--conditioning FILE]
         [--mode ok|fail|forget] [--exec-delay-ms N] [--record FILE]
Prints "PORT <n>" on stdout once listening on 127.0.0.1 (port chosen by the OS).
Standard library only.
"""

import argparse
import json
import os
import shutil
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

# A minimal ISO BMFF file: an ftyp box and an empty mdat box.
MP4_BYTES = (b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"
             b"\x00\x00\x00\x08mdat")

# Classes that pass through (they exist on the real servers the templates target).
PASSTHROUGH = {
    "CLIPLoader", "H3MultiGPUCLIPLoader", "VAELoader", "CLIPTextEncode", "MiniMaxH3ImageToVideo",
    "MiniMaxH3ReferenceToVideo", "EmptyMiniMaxH3LatentAV", "RayInitializer", "RayUNETLoader",
    "RayLoraLoader", "RayMiniMaxH3SigmaShift", "RayBasicScheduler", "RayBasicGuider",
    "KSamplerSelect", "XFuserSamplerCustomAdvanced", "RandomNoise", "VAEDecode", "VAEDecodeTiled",
    "VAEDecodeAudio", "CreateVideo", "KSampler",
}
OUTPUT_CLASSES = {"H3SaveAVLatent", "H3SaveConditioning", "SaveVideo", "VHS_VideoCombine"}


class ExecutionError(Exception):
    def __init__(self, node_id, node_type, exc_type, message):
        super().__init__(message)
        self.node_id, self.node_type, self.exc_type = node_id, node_type, exc_type


class FakeComfyUiServer:
    def __init__(self, args):
        self.args = args
        self.root = os.path.abspath(args.root)
        self.dirs = {t: os.path.join(self.root, t) for t in ("input", "output", "temp")}
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        self.lock = threading.Condition()
        self.queue = []          # [number, prompt_id, prompt, extra_data, outputs]
        self.running = None
        self.history = {}
        self.number = 0
        self.counter = 0
        self.deleted = set()
        self.interrupted = set()
        threading.Thread(target=self.worker, daemon=True).start()

    # ---- recording -------------------------------------------------------------------------
    def record(self, kind, body):
        if self.args.record:
            with self.lock, open(self.args.record, "a") as f:
                f.write(json.dumps({"kind": kind, "body": body}) + "\n")

    # ---- POST /prompt ----------------------------------------------------------------------
    def submit(self, body):
        self.record("prompt", body)
        prompt = body.get("prompt")
        if not isinstance(prompt, dict):
            return 400, {"error": {"type": "no_prompt", "message": "No prompt provided", "details": "",
                                   "extra_info": {}}, "node_errors": {}}
        for node_id, node in prompt.items():
            cls = node.get("class_type") if isinstance(node, dict) else None
            if cls not in PASSTHROUGH and cls not in OUTPUT_CLASSES and cls != "LoadImage" and cls != "H3LoadAVLatent":
                return 400, {"error": {"type": "invalid_prompt",
                                       "message": f"Cannot execute because node {cls} does not exist.",
                                       "details": f"Node ID '#{node_id}'", "extra_info": {}},
                             "node_errors": {}}
        outputs = [k for k, n in prompt.items() if n["class_type"] in OUTPUT_CLASSES]
        if not outputs:
            return 400, {"error": {"type": "prompt_no_outputs", "message": "Prompt has no outputs",
                                   "details": "", "extra_info": {}}, "node_errors": {}}
        prompt_id = str(uuid.uuid4())
        with self.lock:
            number = self.number
            self.number += 1
            if self.args.mode != "forget":
                extra = {"client_id": body.get("client_id")}
                self.queue.append([number, prompt_id, prompt, extra, outputs])
                self.lock.notify_all()
        return 200, {"prompt_id": prompt_id, "number": number, "node_errors": {}}

    # ---- the prompt worker -----------------------------------------------------------------
    def worker(self):
        while True:
            with self.lock:
                while not self.queue:
                    self.lock.wait()
                item = self.queue.pop(0)
                self.running = item
            deadline = time.monotonic() + self.args.exec_delay_ms / 1000.0
            while time.monotonic() < deadline and item[1] not in self.interrupted:
                time.sleep(0.01)
            start = int(time.time() * 1000)
            messages = [["execution_start", {"prompt_id": item[1], "timestamp": start}],
                        ["execution_cached", {"nodes": [], "prompt_id": item[1], "timestamp": start}]]
            outputs, status = {}, None
            try:
                if item[1] in self.interrupted:
                    messages.append(["execution_interrupted", {"prompt_id": item[1], "node_id": item[4][0],
                                                               "node_type": item[2][item[4][0]]["class_type"],
                                                               "executed": [], "timestamp": start}])
                    status = {"status_str": "error", "completed": False, "messages": messages}
                else:
                    outputs = self.execute(item[2])
                    messages.append(["execution_success", {"prompt_id": item[1], "timestamp": start}])
                    status = {"status_str": "success", "completed": True, "messages": messages}
            except ExecutionError as e:
                messages.append(["execution_error", {
                    "prompt_id": item[1], "node_id": e.node_id, "node_type": e.node_type, "executed": [],
                    "exception_message": str(e), "exception_type": e.exc_type,
                    "traceback": ["  File \"execution.py\", line 1, in execute\n"],
                    "current_inputs": {}, "current_outputs": {}, "timestamp": start}])
                status = {"status_str": "error", "completed": False, "messages": messages}
            meta = {k: {"node_id": k, "display_node": k, "parent_node": None, "real_node_id": k} for k in outputs}
            with self.lock:
                self.history[item[1]] = {"prompt": item, "outputs": outputs, "status": status, "meta": meta}
                self.running = None

    def execute(self, prompt):
        if self.args.mode == "fail":
            node_id = next(k for k, n in prompt.items() if n["class_type"] in OUTPUT_CLASSES)
            raise ExecutionError(node_id, prompt[node_id]["class_type"], "torch.OutOfMemoryError",
                                 "Allocation on device 0 would exceed allowed memory. (out of memory)")
        outputs = {}
        for node_id, node in prompt.items():
            cls, inputs = node["class_type"], node["inputs"]
            if cls == "LoadImage":
                self.require_input(node_id, cls, inputs.get("image", ""))
            elif cls == "H3LoadAVLatent":
                path = self.require_input(node_id, cls, inputs.get("path", ""))
                with open(path, "rb") as f:
                    head = f.read(8)
                if len(head) != 8 or int.from_bytes(head, "little") > os.path.getsize(path):
                    raise ExecutionError(node_id, cls, "ValueError", f"{path} is not a safetensors file")
            elif cls == "H3SaveAVLatent":
                outputs[node_id] = {"latents": [self.save(inputs, ".h3latent", src=self.args.latent)]}
            elif cls == "H3SaveConditioning":
                outputs[node_id] = {"conditioning": [self.save(inputs, ".safetensors", src=self.args.conditioning)]}
            elif cls == "SaveVideo":
                outputs[node_id] = {"images": [self.save(inputs, ".mp4", data=MP4_BYTES)], "animated": [True]}
            elif cls == "VHS_VideoCombine":
                ref = self.save(inputs, ".mp4", data=MP4_BYTES)
                ref.update({"format": "video/h264-mp4", "frame_rate": float(inputs.get("frame_rate", 24))})
                outputs[node_id] = {"gifs": [ref]}
        return outputs

    def require_input(self, node_id, cls, name):
        path = name if os.path.isabs(name) else os.path.join(self.dirs["input"], name)
        if not name or not os.path.isfile(path):
            raise ExecutionError(node_id, cls, "FileNotFoundError", f"input file not found: {name}")
        return path

    def save(self, inputs, ext, src=None, data=None):
        prefix = str(inputs.get("filename_prefix", "ComfyUI"))
        subfolder, _, base = prefix.rpartition("/")
        folder = os.path.join(self.dirs["output"], subfolder)
        os.makedirs(folder, exist_ok=True)
        with self.lock:
            self.counter += 1
            name = f"{base}_{self.counter:05}_{ext}"
        dest = os.path.join(folder, name)
        if src is not None:
            shutil.copyfile(src, dest)
        else:
            with open(dest, "wb") as f:
                f.write(data)
        return {"filename": name, "subfolder": subfolder, "type": "output"}

    # ---- other endpoints -------------------------------------------------------------------
    def queue_info(self):
        with self.lock:
            running = [self.running] if self.running else []
            return {"queue_running": running, "queue_pending": list(self.queue)}

    def history_of(self, prompt_id=None):
        with self.lock:
            if prompt_id is None:
                return dict(self.history)
            return {prompt_id: self.history[prompt_id]} if prompt_id in self.history else {}

    def post_queue(self, body):
        self.record("queue", body)
        with self.lock:
            if body.get("clear"):
                self.queue = []
            for pid in body.get("delete", []):
                self.deleted.add(pid)
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
            if self.running and (not body.get("prompt_id") or body["prompt_id"] == self.running[1]):
                self.interrupted.add(self.running[1])

    def upload(self, fields):
        image = fields.get("image")
        if not image or not image[0]:
            return 400, None
        filename, data = image
        kind = fields.get("type", (None, b"input"))[1].decode() or "input"
        subfolder = fields.get("subfolder", (None, b""))[1].decode()
        base = self.dirs.get(kind, self.dirs["input"])
        folder = os.path.normpath(os.path.join(base, subfolder))
        if os.path.commonpath((base, folder)) != base or "/" in filename:
            return 400, None
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, filename), "wb") as f:
            f.write(data)
        self.record("upload", {"name": filename, "subfolder": subfolder, "type": kind})
        return 200, {"name": filename, "subfolder": subfolder, "type": kind}

    def view(self, query):
        filename = query.get("filename", [""])[0]
        if not filename or filename.startswith("/") or ".." in filename:
            return None
        base = self.dirs.get(query.get("type", ["output"])[0])
        if base is None:
            return None
        folder = os.path.abspath(os.path.join(base, query.get("subfolder", [""])[0]))
        if os.path.commonpath((folder, base)) != base:
            return None
        path = os.path.join(folder, os.path.basename(filename))
        return path if os.path.isfile(path) else None


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


def make_handler(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # One write per response (headers + body) and no Nagle delay: keep-alive clients would
        # otherwise wait for a delayed ACK on every request, as aiohttp's clients do not.
        wbufsize = 1 << 16
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def reply(self, status, body=None, raw=None, ctype="application/json"):
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def route(self):
            url = urlparse(self.path)
            path = url.path[4:] if url.path.startswith("/api/") else url.path
            return path, parse_qs(url.query)

        def read_body(self):
            n = int(self.headers.get("Content-Length", 0))
            return self.rfile.read(n) if n else b""

        def do_GET(self):
            path, query = self.route()
            if path == "/queue":
                return self.reply(200, server.queue_info())
            if path == "/history":
                return self.reply(200, server.history_of())
            if path.startswith("/history/"):
                return self.reply(200, server.history_of(path[len("/history/"):]))
            if path == "/view":
                file = server.view(query)
                if not file:
                    return self.reply(404, raw=b"", ctype="text/plain")
                with open(file, "rb") as f:
                    return self.reply(200, raw=f.read(), ctype="application/octet-stream")
            if path == "/system_stats":
                return self.reply(200, {"system": {"os": "posix", "comfyui_version": "fake-0.34.0",
                                                   "python_version": "3", "argv": ["main.py"]},
                                        "devices": [{"name": "fake", "type": "cpu", "index": None,
                                                     "vram_total": 0, "vram_free": 0}]})
            if path == "/prompt":
                with server.lock:
                    remaining = len(server.queue) + (1 if server.running else 0)
                return self.reply(200, {"exec_info": {"queue_remaining": remaining}})
            return self.reply(404, raw=b"", ctype="text/plain")

        def do_POST(self):
            path, _ = self.route()
            body = self.read_body()
            if path == "/upload/image":
                status, out = server.upload(parse_multipart(self.headers.get("Content-Type", ""), body))
                return self.reply(status, out) if out is not None else self.reply(status, raw=b"", ctype="text/plain")
            try:
                data = json.loads(body or b"{}")
            except ValueError:
                return self.reply(400, raw=b"bad json", ctype="text/plain")
            if path == "/prompt":
                status, out = server.submit(data)
                return self.reply(status, out)
            if path == "/queue":
                server.post_queue(data)
                return self.reply(200, raw=b"", ctype="text/plain")
            if path == "/history":
                server.post_history(data)
                return self.reply(200, raw=b"", ctype="text/plain")
            if path == "/interrupt":
                server.interrupt(data)
                return self.reply(200, raw=b"", ctype="text/plain")
            return self.reply(404, raw=b"", ctype="text/plain")

    return Handler


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--latent")
    p.add_argument("--conditioning")
    p.add_argument("--mode", choices=["ok", "fail", "forget"], default="ok")
    p.add_argument("--exec-delay-ms", type=int, default=0)
    p.add_argument("--record")
    args = p.parse_args()
    fake = FakeComfyUiServer(args)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    httpd.daemon_threads = True
    print(f"PORT {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
