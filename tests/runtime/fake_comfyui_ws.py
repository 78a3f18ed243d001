"""The websocket side of FakeComfyUiServer (/ws?clientId=ID), as a real ComfyUI 0.3.64 (a125cd84)
sends it: server.py's websocket_handler (a `status` message on connect; a first text message
{"type": "feature_flags", "data": {...}} is stored for the client and answered with the server's
feature_flags), main.py's progress hook and comfy_execution/progress.py's WebUIProgressHandler for
each sampler step, in the recorded order (recorded-comfyui-v0.3.64-ws.json, from
/tmp/comfy/ws_record.py against the real server with --preview-method latent2rgb and the
H3ProbeSteps node; comfyui_fake_ws_conformance_test.py compares the fake's exchange to it):
  a client without supports_preview_metadata: progress_state, progress, then a binary frame
    u32 BE 1 (PREVIEW_IMAGE), u32 BE 1 (JPEG), the JPEG;
  a client with it: progress_state, a binary frame u32 BE 4 (PREVIEW_IMAGE_WITH_METADATA), u32 BE
    metadata length, metadata JSON {node_id, prompt_id, display_node_id, parent_node_id,
    real_node_id, image_type "image/jpeg"}, the JPEG; then progress.
Preview frames only when the server runs with a preview method (--preview-method latent2rgb; the
real default, none, sends none), one per step; the JPEG is --preview-jpeg's bytes (the real one's
are 512x512 quality 95, 42-68 KB).  --preview-huge-bytes N adds, before step 1's frame, one frame
of N bytes (a preview far above any client's bound); --ignore-feature-flags plays a server that
predates them (type 1 frames whatever the client says).  Standard library only.
"""

import base64
import hashlib
import json
import struct
import threading
import uuid

PREVIEW_IMAGE, PREVIEW_IMAGE_WITH_METADATA = 1, 4


def ws_frame(opcode, payload):
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else
                                     bytes([126]) + struct.pack(">H", n) if n < 65536 else
                                     bytes([127]) + struct.pack(">Q", n))
    return head + payload


class WebSocketSide:
    """Mixed into FakeComfyUiServer: needs self.lock, self.args, self.queue, self.running, self.record."""

    def init_websockets(self):
        self.sockets = {}  # client_id -> (socket, write lock, feature flags): the /ws connections
        self.preview_jpeg = b""
        if self.args.preview_method != "none":
            with open(self.args.preview_jpeg, "rb") as f:
                self.preview_jpeg = f.read()

    def ws_send(self, client_id, msg_type, data, binary=None):
        with self.lock:
            conn = self.sockets.get(client_id) if client_id else None
        if conn is None:
            return
        sock, wlock, _ = conn
        payload = binary if binary is not None else json.dumps({"type": msg_type, "data": data}).encode()
        try:
            with wlock:
                sock.sendall(ws_frame(0x2 if binary is not None else 0x1, payload))
        except OSError:
            pass

    def preview_frame(self, client, prompt_id, nid, image):
        with self.lock:
            flags = self.sockets.get(client, (None, None, {}))[2] if client else {}
        if not flags.get("supports_preview_metadata"):
            return flags, struct.pack(">II", PREVIEW_IMAGE, 1) + image
        meta = json.dumps({"node_id": nid, "prompt_id": prompt_id, "display_node_id": nid,
                           "parent_node_id": None, "real_node_id": nid, "image_type": "image/jpeg"}).encode()
        return flags, struct.pack(">II", PREVIEW_IMAGE_WITH_METADATA, len(meta)) + meta + image

    def step(self, client, prompt_id, nid, value, steps):
        """One sampler step: ProgressRegistry's progress_state, then main.py's hook's `progress`
        and (a client without preview metadata) its PREVIEW_IMAGE; WebUIProgressHandler's
        PREVIEW_IMAGE_WITH_METADATA comes before `progress`, right after progress_state."""
        self.ws_send(client, "progress_state", {"prompt_id": prompt_id, "nodes": {nid: {
            "value": value, "max": steps, "state": "running", "node_id": nid, "prompt_id": prompt_id,
            "display_node_id": nid, "parent_node_id": None, "real_node_id": nid}}})
        frames = []
        if self.preview_jpeg:
            if value == 1 and self.args.preview_huge_bytes > 0:
                frames.append(self.preview_frame(client, prompt_id, nid,
                                                 b"\xff\xd8\xff" + bytes(self.args.preview_huge_bytes - 3)))
            frames.append(self.preview_frame(client, prompt_id, nid, self.preview_jpeg))
        for flags, f in frames:
            if flags.get("supports_preview_metadata"):
                self.ws_send(client, None, None, binary=f)
        self.ws_send(client, "progress", {"value": value, "max": steps, "prompt_id": prompt_id, "node": nid})
        for flags, f in frames:
            if not flags.get("supports_preview_metadata"):
                self.ws_send(client, None, None, binary=f)

    def serve_websocket(self, handler, query):
        """ComfyUI's /ws: the upgrade, a `status` message, then this connection is the client's
        until it closes (a second one with the same clientId replaces it)."""
        key = handler.headers.get("Sec-WebSocket-Key", "")
        if handler.headers.get("Upgrade", "").lower() != "websocket" or not key:
            return handler.reply(400, raw=b"No WebSocket UPGRADE hdr", ctype="text/plain; charset=utf-8")
        accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        handler.send_response(101)
        handler.send_header("Upgrade", "websocket")
        handler.send_header("Connection", "upgrade")
        handler.send_header("Sec-WebSocket-Accept", accept.decode())
        handler.end_headers()
        handler.wfile.flush()
        sid = query.get("clientId", [""])[0] or uuid.uuid4().hex
        sock, wlock, flags = handler.connection, threading.Lock(), {}
        with self.lock:
            self.sockets[sid] = (sock, wlock, flags)
            remaining = len(self.queue) + (1 if self.running else 0)
        self.ws_send(sid, "status", {"status": {"exec_info": {"queue_remaining": remaining}}, "sid": sid})
        first = True
        try:
            while True:  # the client's frames: close ends it, ping gets a pong, the first text may be flags
                head = handler.rfile.read(2)
                if len(head) < 2:
                    break
                op, n = head[0] & 0x0F, head[1] & 0x7F
                if n == 126:
                    n = struct.unpack(">H", handler.rfile.read(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", handler.rfile.read(8))[0]
                mask = handler.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(handler.rfile.read(n)))
                if op == 0x8:
                    break
                if op == 0x9:
                    with wlock:
                        sock.sendall(bytes([0x8A, len(data)]) + data)
                elif op == 0x1 and first:
                    first = False
                    try:
                        msg = json.loads(data)
                    except ValueError:
                        continue
                    if self.args.ignore_feature_flags:  # a server before feature flags (< 0.3.44)
                        continue
                    if isinstance(msg, dict) and msg.get("type") == "feature_flags":
                        with self.lock:
                            flags.update(msg.get("data", {}))
                        self.record("feature_flags", msg.get("data", {}))
                        self.ws_send(sid, "feature_flags", {"supports_preview_metadata": True,
                                                            "max_upload_size": self.args.max_upload_bytes})
        except OSError:
            pass
        finally:
            with self.lock:
                if self.sockets.get(sid, (None,))[0] is sock:
                    del self.sockets[sid]
            handler.close_connection = True
