#!/usr/bin/python3
"""FakeComfyUiServer conforms to a real ComfyUI 0.3.64: every exchange recorded against the real
server (../shared/comfyui/recorded-v0.3.64.json) is replayed, in order, against the fake; the
status code, the media type and the JSON shape of each answer (keys and value types,
recursively; prompt ids, timings and sizes may differ) must equal the recorded ones.

Answers that depend on the server's progress (a queue while a prompt runs, a history once it
ends) are re-asked until they match or a deadline passes. Prompt ids in requests are mapped from
the recorded ones to the fake's. Usage: comfyui_fake_conformance_test.py [RECORDING]. Exit 0 = conform.
Standard library only.
"""

import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "recorded-comfyui-v0.3.64.json")  # a copy of ../shared/comfyui/recorded-v0.3.64.json
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452") + b"\x00" * 54  # 70 bytes, as recorded


def shape(v):
    """Keys and value types, recursively; uuid keys become <id0>, <id1>, ... in their order."""
    if isinstance(v, dict):
        out, n = {}, 0
        for k, x in v.items():
            if UUID.match(k):
                k, n = f"<id{n}>", n + 1
            out[k] = shape(x)
        return out
    if isinstance(v, list):
        return [shape(x) for x in v]
    return {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}[type(v)]


def diff(a, b, path="$"):
    """First difference between two shapes, or None."""
    if type(a) is not type(b):
        return f"{path}: recorded {json.dumps(a)[:120]}, fake {json.dumps(b)[:120]}"
    if isinstance(a, dict):
        if set(a) != set(b):
            return f"{path}: keys recorded {sorted(a)}, fake {sorted(b)}"
        for k in a:
            d = diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
    elif isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items recorded, {len(b)} from the fake"
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d:
                return d
    elif a != b:
        return f"{path}: recorded {a}, fake {b}"
    return None


def multipart(fields, file_name, data):
    boundary = uuid.uuid4().hex
    out = b""
    for k, v in fields.items():
        out += f"--{boundary}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    out += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"{file_name}\"\r\n"
            f"Content-Type: image/png\r\n\r\n").encode() + data + b"\r\n" + f"--{boundary}--\r\n".encode()
    return out, f"multipart/form-data; boundary={boundary}"


class Replay:
    def __init__(self, port):
        self.port = port
        self.ids = {}  # recorded prompt id -> the fake's
        self.placeholders = {}  # a path's last segment standing for a prompt id ("A") -> the fake's

    def map_ids(self, text):
        for rec, fake in self.ids.items():
            text = text.replace(rec, fake)
        return text

    def request(self, method, path, body, ctype):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        headers = {"Content-Type": ctype} if ctype else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, (r.getheader("Content-Type") or "").split(";")[0], data

    def send(self, ex):
        method, path = ex["req"].split(" ", 1)
        head, _, last = path.rpartition("/")
        path = self.map_ids(head + "/" + self.placeholders.get(last, last))
        body, ctype = None, None
        if path == "/upload/image":
            overwrite = "true" if "overwrite=true" in ex["note"] else "false"
            body, ctype = multipart({"type": "input", "subfolder": "probe", "overwrite": overwrite}, "x.png", PNG)
        elif ex["note"].startswith("reject: invalid JSON"):
            body, ctype = b"{not json", "application/json"
        elif ex.get("body") is not None:
            body, ctype = self.map_ids(json.dumps(ex["body"])).encode(), "application/json"
        return self.request(method, path, body, ctype)

    def check(self, i, ex):
        """None when the fake's answer has the recorded status, media type and shape."""
        status, ctype, data = self.send(ex)
        rec_type = (ex.get("content_type") or "").split(";")[0]
        problems = []
        if status != ex["status"]:
            problems.append(f"status {status}, recorded {ex['status']}")
        if rec_type and ctype != rec_type:
            problems.append(f"content type {ctype}, recorded {rec_type}")
        resp = ex["resp"]
        if isinstance(resp, dict) and "_bytes" in resp:
            if ctype.startswith("text/") and data.hex()[:len(resp["_head"])] != resp["_head"]:
                problems.append(f"body {data[:40]!r} does not start like the recorded one")
        elif resp is None:
            if data:
                problems.append(f"a body of {len(data)} bytes where the recorded answer had none")
        else:
            try:
                got = json.loads(data)
            except ValueError:
                return [f"not JSON: {data[:80]!r}"], None
            d = diff(shape(resp), shape(got))
            if d:
                problems.append(d)
            return problems, got
        return problems, None


def main():
    recording = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    with open(recording) as f:
        exchanges = json.load(f)["exchanges"]
    # The recording's handoff nodes were a stand-in pack; the fake serves h3pipe's real node pack,
    # so its /object_info entries are checked against the same server's answer with the real pack
    # installed (recorded by the split's tests).
    with open(os.path.join(HERE, "..", "comfyui", "recorded_object_info_h3pipe_nodes.json")) as f:
        pack = json.load(f)
    for ex in exchanges:
        cls = ex["req"].rsplit("/", 1)[-1]
        if ex["req"].startswith("GET /object_info/") and cls in pack:
            ex["resp"] = {cls: pack[cls]}
            ex["note"] += " (real pack)"
    root = tempfile.mkdtemp(prefix="fake-comfyui-conformance-")
    proc = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "fake_comfyui_server.py"), "--root", root],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            print(f"the fake did not start: {line!r}")
            return 1
        replay = Replay(int(line.split()[1]))
        failures = 0
        placeholders = {"A": 16, "ID": 27}  # "GET /history/A" names exchange 16's prompt
        for i, ex in enumerate(exchanges):
            for name, j in placeholders.items():
                if ex["req"].endswith("/" + name) and exchanges[j]["resp"]["prompt_id"] in replay.ids:
                    replay.placeholders[name] = replay.ids[exchanges[j]["resp"]["prompt_id"]]
            deadline = time.monotonic() + 10
            while True:
                problems, got = replay.check(i, ex)
                if not problems or time.monotonic() > deadline or ex["req"].startswith("POST"):
                    break
                time.sleep(0.05)
            if isinstance(got, dict) and ex["req"] == "POST /prompt" and "prompt_id" in got:
                replay.ids[ex["resp"]["prompt_id"]] = got["prompt_id"]
            verdict = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
            print(f"[{i:2}] {ex['req'][:60]:60} {ex['note'][:48]:48} {verdict}")
            failures += bool(problems)
        print(f"{len(exchanges) - failures}/{len(exchanges)} exchanges conform")
        return 1 if failures else 0
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
