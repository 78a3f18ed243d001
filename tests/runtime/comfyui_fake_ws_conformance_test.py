#!/usr/bin/python3
"""FakeComfyUiServer's websocket side conforms to a real ComfyUI 0.3.64: the exchange recorded against
the real server (recorded-comfyui-v0.3.64-ws.json: a 4-step sampler with --preview-method latent2rgb,
once as a plain client, once as a client that announced supports_preview_metadata) is made again with
the fake (--preview-method latent2rgb, --exec-steps 4), and per step the messages' order, the text
messages' shapes (keys and value types), the binary frames' layout (event type, image type or metadata
keys and image_type, the image's magic bytes) and the feature_flags answer must be the recorded ones.
Exit 0 = conform.  Standard library (and ffmpeg for the preview JPEG) only.
"""

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from comfyui_fake_conformance_test import diff, shape  # noqa: E402

RECORDED = os.path.join(HERE, "recorded-comfyui-v0.3.64-ws.json")
STEPS = 4


class Ws:
    """A minimal RFC 6455 client: masked text out, whole messages in."""

    def __init__(self, port, client_id):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /ws?clientId={client_id} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.sock.recv(4096)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert b" 101 " in head.split(b"\r\n")[0], head

    def send_text(self, text):
        data, mask = text.encode(), os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the fake closed the websocket")
            self.buf += chunk

    def receive(self):
        self.need(2)
        op, n, at = self.buf[0] & 0x0F, self.buf[1] & 0x7F, 2
        if n == 126:
            self.need(4)
            n, at = struct.unpack(">H", self.buf[2:4])[0], 4
        elif n == 127:
            self.need(10)
            n, at = struct.unpack(">Q", self.buf[2:10])[0], 10
        self.need(at + n)
        data, self.buf = self.buf[at:at + n], self.buf[at + n:]
        return op, data


def summary(data):
    """A binary frame as the recording summarises it (ws_record.py)."""
    t = struct.unpack(">I", data[:4])[0]
    out = {"binary_type": t, "bytes": len(data)}
    if t == 1:
        out["image_type"] = struct.unpack(">I", data[4:8])[0]
        out["magic"] = data[8:11].hex()
    if t == 4:
        n = struct.unpack(">I", data[4:8])[0]
        out["metadata"] = json.loads(data[8:8 + n])
        out["magic"] = data[8 + n:8 + n + 3].hex()
    return out


def fake_exchange(port, flags):
    cid, pid = str(uuid.uuid4()), str(uuid.uuid4())
    ws = Ws(port, cid)
    if flags:
        ws.send_text(json.dumps({"type": "feature_flags", "data": {"supports_preview_metadata": True}}))
        time.sleep(0.2)  # the real server reads it before the prompt runs
    # batch_size differs per exchange: the fake's cache would serve node 1 of the second one.
    graph = {"1": {"class_type": "EmptyLatentImage", "inputs": {"width": 256, "height": 256,
                                                                    "batch_size": 2 if flags else 1}},
             "2": {"class_type": "SaveLatent", "inputs": {"samples": ["1", 0], "filename_prefix": f"h3probe/{pid}"}}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/prompt", method="POST",
                                 data=json.dumps({"prompt": graph, "client_id": cid, "prompt_id": pid}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        out = [{"post_prompt": r.status, "body": json.loads(r.read())}]
    while True:
        op, data = ws.receive()
        if op == 0x2:
            out.append(summary(data))
            continue
        j = json.loads(data)
        out.append(j)
        if j["type"] == "executing" and j["data"].get("node") is None and j["data"].get("prompt_id") == pid:
            return out


def kind(m):
    if "binary_type" in m:
        return f"binary {m['binary_type']}"
    return m.get("type", "post_prompt")


def step_block(msgs):
    """The sampler's steps: after `executing` of the stepping node, through its last `progress`
    (and a frame right after it)."""
    last = max(i for i, m in enumerate(msgs) if kind(m) == "progress")
    node = msgs[last]["data"]["node"]
    first = next(i for i, m in enumerate(msgs) if kind(m) == "executing" and m["data"].get("node") == node) + 1
    if last + 1 < len(msgs) and kind(msgs[last + 1]).startswith("binary"):
        last += 1
    return msgs[first:last + 1]


def frame_shape(m):
    if "binary_type" not in m:
        return shape(m)
    s = {k: v for k, v in m.items() if k != "bytes"}
    if "metadata" in s:
        s["metadata"] = {k: (v if k == "image_type" else shape(v)) for k, v in s["metadata"].items()}
    return s


def check(name, recorded, fake):
    problems = []
    rb, fb = step_block(recorded), step_block(fake)
    if [kind(m) for m in rb] != [kind(m) for m in fb]:
        problems.append(f"{name}: step messages recorded {[kind(m) for m in rb]}, fake {[kind(m) for m in fb]}")
    else:
        for i, (a, b) in enumerate(zip(rb, fb)):
            d = diff(frame_shape(a), frame_shape(b), f"{name} step message {i} ({kind(a)})")
            if d:
                problems.append(d)
    sizes = [m["bytes"] for m in fb if "binary_type" in m]
    real = [m["bytes"] for m in rb if "binary_type" in m]
    print(f"{name}: {len(rb)} step messages as recorded; frames recorded {real} bytes, fake {sizes} bytes")
    if sizes and not all(min(real) // 2 <= s <= 2 * max(real) for s in sizes):
        problems.append(f"{name}: fake frames of {sizes} bytes, recorded {real}")
    rf = [m for m in recorded if kind(m) == "feature_flags"]
    ff = [m for m in fake if kind(m) == "feature_flags"]
    if len(rf) != len(ff) or (rf and diff(shape(rf[0]), shape(ff[0]), f"{name} feature_flags")):
        problems.append(f"{name}: feature_flags answers recorded {rf}, fake {ff}")
    return problems


def main():
    recorded = json.load(open(RECORDED))["exchanges"]
    root = tempfile.mkdtemp(prefix="fake-comfyui-ws-conformance-")
    jpeg = os.path.join(root, "preview.jpg")
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=s=512x512,noise=alls=4", "-frames:v", "1",
                    "-q:v", "2", jpeg], check=True)
    proc = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "fake_comfyui_server.py"), "--root", root,
                             "--preview-method", "latent2rgb", "--preview-jpeg", jpeg, "--exec-delay-ms", "400",
                             "--exec-steps", str(STEPS)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            print(f"the fake did not start: {line!r}")
            return 1
        port = int(line.split()[1])
        problems = check("preview_image", recorded["preview_image"]["messages"], fake_exchange(port, False))
        problems += check("preview_image_with_metadata", recorded["preview_image_with_metadata"]["messages"],
                          fake_exchange(port, True))
    finally:
        proc.terminate()
        proc.wait()
    for p in problems:
        print("MISMATCH", p)
    print("conform" if not problems else f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
