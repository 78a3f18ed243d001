#!/usr/bin/python3
"""FakeKubeApiServer: a test double for the few Kubernetes API calls the chart's CURVE key hook
Job makes (helm/h3pipe/files/curve-keys.sh): GET, POST and PATCH (JSON merge patch) of core/v1
Secrets in one namespace, over HTTPS with a bearer token, authorized by the rules of a Role.

No Kubernetes cluster runs in CI, so this stands in for kube-apiserver.  It answers as the real
one does (shapes from the API's documented behaviour and recorded answers): compact JSON
(Go's encoding/json), `application/json`; errors are Status objects
{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":...,"reason":...,
"details":{"name":...,"kind":"secrets"},"code":...}: 404 NotFound (`secrets "x" not found`),
409 AlreadyExists (`secrets "x" already exists`), 403 Forbidden (`secrets "x" is forbidden:
User "system:serviceaccount:NS:SA" cannot get resource "secrets" in API group "" in the
namespace "NS"`), 401 Unauthorized, 415 for a patch type it does not take, 422 Invalid for a
bad data key, 400 for a body that is not a v1 Secret or holds bad base64.  RBAC as the API
server applies it: a rule with resourceNames never matches create (the request has no name).
Created Secrets carry uid, resourceVersion, creationTimestamp and managedFields (whose
"f:<key>" entries a careless key search would trip over)."""
import base64
import datetime
import http.server
import json
import os
import re
import ssl
import subprocess
import threading
import uuid

DATA_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
PATCH_TYPES = {"application/merge-patch+json"}


def make_pki(d, hosts=("127.0.0.1",)):
    """A cluster CA and a server certificate for `hosts` (IP SANs) signed by it, with openssl."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = os.path.join(d, "server.key"), os.path.join(d, "server.csr"), os.path.join(d, "server.crt")
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
        "-subj", "/CN=fake-kube-ca", "-keyout", ca_key, "-out", ca_crt)
    run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-subj", "/CN=kube-apiserver", "-keyout", key, "-out", csr)
    ext = os.path.join(d, "san.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join(f"IP:{h}" for h in hosts) + ",DNS:kubernetes.default.svc\n")
    run("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial", "-days", "1",
        "-extfile", ext, "-out", crt)
    return ca_crt, crt, key


def status(code, reason, message, name=None):
    s = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
         "reason": reason, "code": code}
    if name is not None:
        s["details"] = {"name": name, "kind": "secrets"}
    return s


def merge_patch(target, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class FakeKubeApiServer:
    def __init__(self, workdir, namespace, service_account, token, rules):
        self.namespace, self.token, self.rules = namespace, token, rules
        self.user = f"system:serviceaccount:{namespace}:{service_account}"
        self.secrets = {}      # name -> stored object
        self.requests = []     # (method, path, content type, parsed body or None)
        self.before_post = None  # callable run before a POST is handled (a concurrent writer)
        self.ca, crt, key = make_pki(workdir)
        self.lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                server.handle(self, "GET")

            def do_POST(self):
                server.handle(self, "POST")

            def do_PATCH(self):
                server.handle(self, "PATCH")

            def do_PUT(self):
                server.handle(self, "PUT")

            def do_DELETE(self):
                server.handle(self, "DELETE")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def service_account_dir(self, d):
        """What the kubelet mounts at /var/run/secrets/kubernetes.io/serviceaccount."""
        os.makedirs(d, exist_ok=True)
        with open(self.ca) as f:
            ca = f.read()
        for name, text in (("token", self.token), ("namespace", self.namespace), ("ca.crt", ca)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d

    # ---- the API -----------------------------------------------------------------------------

    def allowed(self, verb, name):
        for r in self.rules:
            if "" not in r.get("apiGroups", []) or "secrets" not in r.get("resources", []):
                continue
            if verb not in r.get("verbs", []) and "*" not in r.get("verbs", []):
                continue
            names = r.get("resourceNames")
            if names and (name is None or name not in names):
                continue
            return True
        return False

    def forbidden(self, verb, name):
        what = f'secrets "{name}"' if name else "secrets"
        return 403, status(403, "Forbidden", f'{what} is forbidden: User "{self.user}" cannot {verb} resource '
                           f'"secrets" in API group "" in the namespace "{self.namespace}"', name or "")

    def stored(self, name, labels, data, typ, previous=None):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        meta = dict(previous["metadata"]) if previous else {
            "name": name, "namespace": self.namespace, "uid": str(uuid.uuid4()), "creationTimestamp": now}
        meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1000")) + 1)
        if labels:
            meta["labels"] = labels
        meta["managedFields"] = [{"manager": "curl", "operation": "Update", "apiVersion": "v1", "time": now,
                                  "fieldsType": "FieldsV1", "fieldsV1": {
                                      "f:data": {".": {}, **{f"f:{k}": {} for k in data}}, "f:type": {}}}]
        return {"kind": "Secret", "apiVersion": "v1", "metadata": meta, "data": data, "type": typ}

    def check_secret(self, obj, name):
        """What the API server checks of a Secret: (code, Status) or None."""
        for k, v in (obj.get("data") or {}).items():
            if not DATA_KEY.match(k):
                return 422, status(422, "Invalid", f'Secret "{name}" is invalid: data[{k}]: Invalid value: "{k}": '
                                   "a valid config key must consist of alphanumeric characters, '-', '_' or '.'", name)
            try:
                base64.b64decode(v, validate=True)
            except Exception:
                return 400, status(400, "BadRequest", f"illegal base64 data in data[{k}]")
        return None

    def answer(self, method, name, ctype, body):
        prefix = f"/api/v1/namespaces/{self.namespace}/secrets"
        if method == "GET":
            if not self.allowed("get", name):
                return self.forbidden("get", name)
            if name not in self.secrets:
                return 404, status(404, "NotFound", f'secrets "{name}" not found', name)
            return 200, self.secrets[name]
        if method == "POST" and name is None:
            if not self.allowed("create", None):
                return self.forbidden("create", None)
            if ctype != "application/json":
                return 415, status(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf')
            if not isinstance(body, dict) or body.get("apiVersion") != "v1" or body.get("kind") != "Secret":
                return 400, status(400, "BadRequest", "the object provided is unrecognized (must be of type Secret)")
            meta = body.get("metadata") or {}
            new = meta.get("name")
            if not new:
                return 422, status(422, "Invalid", 'Secret "" is invalid: metadata.name: Required value: name or generateName is required', "")
            if meta.get("namespace") not in (None, self.namespace):
                return 400, status(400, "BadRequest", "the namespace of the provided object does not match the namespace sent on the request")
            bad = self.check_secret(body, new)
            if bad:
                return bad
            if self.before_post:
                self.before_post()
            if new in self.secrets:
                return 409, status(409, "AlreadyExists", f'secrets "{new}" already exists', new)
            self.secrets[new] = self.stored(new, meta.get("labels"), body.get("data") or {}, body.get("type", "Opaque"))
            return 201, self.secrets[new]
        if method == "PATCH" and name:
            if not self.allowed("patch", name):
                return self.forbidden("patch", name)
            if ctype not in PATCH_TYPES:
                return 415, status(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media types include: {', '.join(sorted(PATCH_TYPES))}")
            if name not in self.secrets:
                return 404, status(404, "NotFound", f'secrets "{name}" not found', name)
            if not isinstance(body, dict):
                return 400, status(400, "BadRequest", "invalid JSON merge patch")
            old = self.secrets[name]
            merged = merge_patch(old, body)
            bad = self.check_secret(merged, name)
            if bad:
                return bad
            self.secrets[name] = self.stored(name, merged["metadata"].get("labels"), merged.get("data") or {},
                                             merged.get("type", "Opaque"), previous=old)
            return 200, self.secrets[name]
        verb = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]
        if not self.allowed(verb, name):
            return self.forbidden(verb, name)
        return 405, status(405, "MethodNotAllowed", f"{method} is not supported by this fake ({prefix})")

    def handle(self, h, method):
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        ctype = (h.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = ValueError
        prefix = f"/api/v1/namespaces/{self.namespace}/secrets"
        path = h.path.split("?")[0]
        with self.lock:
            self.requests.append((method, path, ctype, None if body is ValueError else body))
            if h.headers.get("Authorization") != f"Bearer {self.token}":
                code, obj = 401, status(401, "Unauthorized", "Unauthorized")
            elif body is ValueError:
                code, obj = 400, status(400, "BadRequest", "json: cannot unmarshal the request body")
            elif path == prefix:
                code, obj = self.answer(method, None, ctype, body)
            elif path.startswith(prefix + "/") and "/" not in path[len(prefix) + 1:]:
                code, obj = self.answer(method, path[len(prefix) + 1:], ctype, body)
            else:
                code, obj = 404, status(404, "NotFound", "the server could not find the requested resource")
        out = json.dumps(obj, separators=(",", ":")).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(out)))
        h.end_headers()
        h.wfile.write(out)
