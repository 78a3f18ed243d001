#!/usr/bin/python3
"""compose.yaml, the per-host env files, docker/Dockerfile and the container helpers.

- `docker-compose config` (Debian's docker-compose 1.29, no engine needed) accepts compose.yaml
  with each host's env file.  Where docker-compose is absent the file is parsed with PyYAML only
  (the test says so in its output).
- Parsed with PyYAML and interpolated like compose does, every h3pipe service's command uses only
  the flags the binaries take, names the mounted config, publishes its metrics and readiness
  ports, tells the image's HEALTHCHECK the same readiness port, reserves the GPUs its env file
  names (and exposes the same ids as NVIDIA_VISIBLE_DEVICES); the env files name pools of the
  right stage on the right host of deploy/cluster.seeds.json with that pool's GPU ids, and their
  COMPOSE_PROFILES are the roles the config gives the host.
- docker/Dockerfile: a target per image, non-root, HEALTHCHECK on the readiness port that
  compose.yaml uses, nothing site-specific copied in, runtime packages that exist in Debian 12
  and (with built binaries) provide every shared library the binaries load.
- docker/healthcheck.sh against a live endpoint answering 200, 503 and nothing.
- configs/redis/entrypoint.sh starts a real redis-server with the ACL users and AOF, and the
  compose healthcheck command passes against it.

Usage: compose_test.py SOURCE_DIR [BIN_DIR]
"""
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import yaml

SRC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = sys.argv[2] if len(sys.argv) > 2 else ""
HOSTS = ["node292", "node241"]
SERVICE_FLAGS = {"--config", "--host", "--pool", "--bind", "--metrics-port", "--health-port",
                 "--redis", "--state-dir", "--log-level"}
H3PIPE_SERVICES = {"encoder": "encode", "sampler0": "sample", "sampler1": "sample", "decoder": "decode",
                   "transfer": None}


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                env[k] = v
    return env


VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(v, env):
    """compose's variable substitution: ${V}, ${V:-d}, ${V-d}, ${V:?e}, ${V?e}, $V, $$."""
    if isinstance(v, dict):
        return {k: interpolate(x, env) for k, x in v.items()}
    if isinstance(v, list):
        return [interpolate(x, env) for x in v]
    if not isinstance(v, str):
        return v

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, arg = m.group(2), m.group(3)
        val = env.get(name)
        if op in (":-", "-"):
            if val is None or (op == ":-" and val == ""):
                return interpolate(arg, env)
        elif op in (":?", "?"):
            if val is None or (op == ":?" and val == ""):
                raise KeyError(f"required variable {name}: {arg}")
        return val or ""
    return VAR.sub(sub, v)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def load_compose():
    with open(os.path.join(SRC, "compose.yaml")) as f:
        return yaml.safe_load(f)  # resolves the x-h3pipe-service anchors and << merges


def load_cluster():
    with open(os.path.join(SRC, "deploy", "cluster.seeds.json")) as f:
        return json.load(f)


def expected_profiles(cluster, host):
    """The roles remote::compose_profiles gives a host (common/remote/remote.cpp)."""
    h = [x for x in cluster["hosts"] if x["name"] == host][0]
    pools = [p for p in cluster["pools"] if p["host"] == host]
    stages = [p["stage"] for p in pools]
    out = []
    r = cluster["redis"]
    if not r.get("embedded", True) and r["host"] in (h["name"], h["address"]):
        out.append("control")
    if "sample" in stages:
        out.append("sampler-host")
    if stages.count("sample") == 2:
        out.append("sampler-host-2")
    if "encode" in stages and "sample" not in stages:
        out.append("encoder-host")
    if "decode" in stages:
        out.append("decoder-host")
    return out


def dockerfile_targets():
    """{target: {"from": base, "lines": [instructions]}} of docker/Dockerfile."""
    targets, cur = {}, None
    with open(os.path.join(SRC, "docker", "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            cur = m.group(2) or f"stage{len(targets)}"
            targets[cur] = {"from": m.group(1), "lines": []}
            continue
        if cur:
            targets[cur]["lines"].append(line)
    return targets


class Compose(unittest.TestCase):
    def test_docker_compose_config_accepts_each_host(self):
        dc = shutil.which("docker-compose")
        if not dc:
            print("docker-compose is not installed: compose.yaml checked with PyYAML only")
            load_compose()
            return
        for host in HOSTS:
            env = os.path.join(SRC, "deploy", f"{host}.env")
            r = subprocess.run([dc, "--env-file", env, "-f", os.path.join(SRC, "compose.yaml"), "config"],
                               capture_output=True, text=True, cwd=SRC)
            self.assertEqual(r.returncode, 0, f"{host}: {r.stderr}")
            out = yaml.safe_load(r.stdout)
            self.assertIn("sampler0", out["services"])

    def test_services_match_the_binaries(self):
        compose = load_compose()
        cluster = load_cluster()
        published = {}
        for host in HOSTS:
            env = read_env(os.path.join(SRC, "deploy", f"{host}.env"))
            c = interpolate(compose, env)
            profiles = env["COMPOSE_PROFILES"].split(",")
            self.assertEqual(profiles, expected_profiles(cluster, host), host)
            self.assertEqual(env["H3PIPE_HOST"], host)
            hostcfg = [h for h in cluster["hosts"] if h["name"] == host][0]
            self.assertEqual(int(env["H3PIPE_TRANSFER_PORT"]), hostcfg["transfer_port"])
            for name, stage in H3PIPE_SERVICES.items():
                svc = c["services"][name]
                with self.subTest(host=host, service=name):
                    flags = {}
                    for a in svc["command"]:
                        k, _, v = a.partition("=")
                        self.assertIn(k, SERVICE_FLAGS, a)
                        self.assertNotIn(k, flags)
                        flags[k] = v
                    for k in ("--config", "--host", "--bind", "--metrics-port", "--health-port", "--state-dir"):
                        self.assertIn(k, flags)
                    self.assertEqual(flags["--host"], host)
                    self.assertEqual(flags["--bind"], "0.0.0.0")
                    mounts = {m.split(":")[1]: m.split(":")[0] for m in svc["volumes"]}
                    self.assertIn(flags["--config"], mounts)
                    self.assertTrue(flags["--state-dir"].startswith("/var/lib/h3pipe/"))
                    self.assertIn("/var/lib/h3pipe", mounts)
                    self.assertIn("/etc/h3pipe/keys", mounts)
                    ports = {p.split(":")[1]: p.split(":")[0] for p in svc["ports"]}
                    for k in ("--metrics-port", "--health-port"):
                        self.assertEqual(ports.get(flags[k]), flags[k], f"{k} not published")
                        published.setdefault(flags[k], name)
                        self.assertEqual(published[flags[k]], name, f"port {flags[k]} used twice")
                    self.assertEqual(svc["environment"]["H3PIPE_HEALTH_PORT"], flags["--health-port"])
                    self.assertEqual(svc["user"], "10001:10001")
                    self.assertIn("redis_password", svc["secrets"])
                    if stage is None:  # transfer: one per host, no pool, the data port published
                        self.assertNotIn("--pool", flags)
                        tp = env["H3PIPE_TRANSFER_PORT"]
                        self.assertEqual(ports.get(tp), tp)
                        continue
                    self.assertIn("--pool", flags)
                    dev = svc["deploy"]["resources"]["reservations"]["devices"][0]
                    self.assertEqual(dev["driver"], "nvidia")
                    self.assertIn("gpu", dev["capabilities"])
                    self.assertIn("utility", dev["capabilities"], "NVML needs the utility capability")
                    self.assertEqual(dev["device_ids"], [svc["environment"]["NVIDIA_VISIBLE_DEVICES"]])
                    active = bool(set(svc["profiles"]) & set(profiles))
                    if active:
                        pool = [p for p in cluster["pools"] if p["name"] == flags["--pool"]]
                        self.assertTrue(pool, f"pool {flags['--pool']} is not in the config")
                        self.assertEqual(pool[0]["host"], host)
                        self.assertEqual(pool[0]["stage"], stage)
                        self.assertEqual(dev["device_ids"][0], ",".join(map(str, pool[0]["gpus"])))

    def test_control_profile(self):
        c = interpolate(load_compose(), read_env(os.path.join(SRC, "deploy", "node241.env")))
        redis = c["services"]["redis"]
        self.assertEqual(redis["profiles"], ["control"])
        self.assertIn("./configs/redis:/usr/local/etc/redis:ro", redis["volumes"])
        self.assertTrue(any(v.startswith("redis-data:") for v in redis["volumes"]))
        prom = c["services"]["prometheus"]
        self.assertIn("--config.file=/etc/prometheus/prometheus.yml", prom["command"])
        self.assertIn("./configs/prometheus:/etc/prometheus:ro", prom["volumes"])
        graf = c["services"]["grafana"]
        self.assertIn("./configs/grafana/provisioning:/etc/grafana/provisioning:ro", graf["volumes"])
        # The provisioned datasource's uid is the one every dashboard panel uses.
        with open(os.path.join(SRC, "configs/grafana/provisioning/datasources/prometheus.yml")) as f:
            uid = yaml.safe_load(f)["datasources"][0]["uid"]
        with open(os.path.join(SRC, "configs/grafana/dashboards/h3pipe.json")) as f:
            dash = json.load(f)
        for p in dash["panels"]:
            if p["type"] != "row":
                self.assertEqual(p["datasource"]["uid"], uid, p["title"])
        self.assertEqual(len({p["id"] for p in dash["panels"]}), len(dash["panels"]))
        cli = c["services"]["cli"]
        self.assertEqual(cli["network_mode"], "host")

    def test_dockerfile(self):
        t = dockerfile_targets()
        ports = {"encoder": "9501", "sampler": "9502", "decoder": "9504", "transfer": "9505"}
        for target in ("encoder", "sampler", "decoder", "transfer", "cli"):
            with self.subTest(target=target):
                self.assertIn(target, t)
                lines = t[target]["lines"]
                self.assertIn("USER 10001:10001", lines)
                binary = "h3pipe" if target == "cli" else f"h3pipe-{target}"
                self.assertIn(f'ENTRYPOINT ["{binary}"]', lines)
                self.assertIn(f"COPY --from=build /out/bin/{binary} /usr/local/bin/", lines)
                base = t[target]["from"]
                self.assertEqual(base, "runtime-gpu" if target in ("encoder", "sampler", "decoder") else "runtime-base")
                if target != "cli":
                    self.assertIn(f"ENV H3PIPE_HEALTH_PORT={ports[target]}", lines)
                    self.assertTrue(any(l.startswith("HEALTHCHECK") and "h3pipe-healthcheck" in l for l in lines))
        for name, stage in t.items():
            for l in stage["lines"]:
                if l.startswith("COPY") and "--from" not in l:
                    self.assertNotRegex(l, r"configs/|deploy/|keys|secret", f"{name}: {l}")
        self.assertIn("scripts/setup.sh --no-build", " ".join(t["build"]["lines"]))
        self.assertTrue(t["build"]["from"].startswith("${DEBIAN_IMAGE}"))

    def test_runtime_packages(self):
        t = dockerfile_targets()
        line = [l for l in t["runtime-base"]["lines"] if "apt-get install" in l][0]
        pkgs = [w for w in line.split("--no-install-recommends", 1)[1].split("&&")[0].split() if not w.startswith("-")]
        if not shutil.which("apt-cache"):
            self.skipTest("apt-cache is not available")
        # One apt-cache call (each call loads the whole cache: seconds).
        r = subprocess.run(["apt-cache", "policy"] + pkgs, capture_output=True, text=True)
        known = {}
        name = None
        for line in r.stdout.splitlines():
            m = re.match(r"^(\S+):$", line)
            if m:
                name = m.group(1)
            elif name and line.strip().startswith("Candidate:"):
                known[name] = line.split(":", 1)[1].strip()
        for p in pkgs:
            self.assertNotIn(known.get(p, "(none)"), ("(none)",), f"package {p} is not in this Debian's archive")
        if not BIN or not os.path.isdir(BIN):
            print("no built binaries given: shared-library coverage not checked")
            return
        binaries = [os.path.join(BIN, b) for b in os.listdir(BIN) if b == "h3pipe" or b.startswith("h3pipe-")]
        if not binaries:
            print(f"no h3pipe binaries in {BIN}: shared-library coverage not checked")
            return
        # Packages providing every library the binaries load...
        paths = set()
        for b in binaries:
            out = subprocess.run(["ldd", b], capture_output=True, text=True).stdout
            paths |= {os.path.realpath(m.group(1)) for m in re.finditer(r"=> (/\S+)", out)}
        r = subprocess.run(["dpkg", "-S"] + sorted(paths), capture_output=True, text=True)
        needed = {line.split(":")[0] for line in r.stdout.splitlines() if ":" in line}
        # ... must be the runtime list or what it pulls in.
        r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                            "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
                            "--no-pre-depends"] + pkgs, capture_output=True, text=True)
        closure = set(pkgs) | {l.strip().split()[-1].strip("<>") for l in r.stdout.splitlines()}
        closure = {p.split(":")[0] for p in closure}
        essential = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libzstd1", "liblzma5", "libbz2-1.0",
                     "libselinux1", "libcrypt1", "libsystemd0", "libcap2", "libgpg-error0", "libgcrypt20",
                     "liblz4-1", "libtinfo6", "libpcre2-8-0", "libblkid1", "libmount1", "libudev1"}
        missing = sorted(needed - closure - essential)
        self.assertEqual(missing, [], "libraries of the binaries that the runtime image would lack")


class Helpers(unittest.TestCase):
    def test_healthcheck_script(self):
        state = {"code": 200}

        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                self.send_response(state["code"] if self.path == "/readyz" else 404)
                self.end_headers()

            def log_message(self, *a):
                pass
        srv = http.server.HTTPServer(("127.0.0.1", 0), H)
        th = threading.Thread(target=srv.serve_forever, daemon=True)
        th.start()
        script = os.path.join(SRC, "docker", "healthcheck.sh")
        port = str(srv.server_address[1])
        try:
            self.assertEqual(subprocess.run([script, port], capture_output=True).returncode, 0)
            state["code"] = 503
            self.assertNotEqual(subprocess.run([script, port], capture_output=True).returncode, 0)
            env = dict(os.environ, H3PIPE_HEALTH_PORT=port)
            state["code"] = 200
            self.assertEqual(subprocess.run([script], env=env, capture_output=True).returncode, 0)
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertNotEqual(subprocess.run([script, str(free_port())], capture_output=True).returncode, 0)

    def test_redis_entrypoint(self):
        if not shutil.which("redis-server") or not shutil.which("redis-cli"):
            self.skipTest("redis-server is not installed")
        with tempfile.TemporaryDirectory() as d:
            pw, kpw = os.path.join(d, "pw"), os.path.join(d, "kpw")
            with open(pw, "w") as f:
                f.write("s3cret pass\n")
            with open(kpw, "w") as f:
                f.write("keda-pw\n")
            os.makedirs(os.path.join(d, "data"))
            port = free_port()
            env = dict(os.environ, REDIS_CONF=os.path.join(SRC, "configs/redis/redis.conf"),
                       REDIS_ACL_DIR=os.path.join(d, "acl"), REDIS_PASSWORD_FILE=pw,
                       REDIS_KEDA_PASSWORD_FILE=kpw, REDIS_SERVER="redis-server")
            proc = subprocess.Popen(["sh", os.path.join(SRC, "configs/redis/entrypoint.sh"), "--port", str(port),
                                     "--bind", "127.0.0.1", "--dir", os.path.join(d, "data")],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                def cli(user, password, *args):
                    e = dict(os.environ, REDISCLI_AUTH=password) if password else dict(os.environ)
                    cmd = ["redis-cli", "--no-auth-warning", "-p", str(port)]
                    if user:
                        cmd += ["--user", user]
                    return subprocess.run(cmd + list(args), capture_output=True, text=True, env=e).stdout.strip()
                deadline = time.time() + 10
                while time.time() < deadline and cli("h3pipe", "s3cret pass", "PING") != "PONG":
                    time.sleep(0.05)
                self.assertEqual(cli("h3pipe", "s3cret pass", "PING"), "PONG")
                self.assertIn("NOAUTH", cli(None, None, "PING"), "the default user must be off")
                self.assertIn("aof_enabled:1", cli("h3pipe", "s3cret pass", "INFO", "persistence"))
                self.assertRegex(cli("h3pipe", "s3cret pass", "XADD", "h3pipe:stream:sample", "*", "a", "b"), r"^\d+-\d+$")
                self.assertIn("NOPERM", cli("h3pipe", "s3cret pass", "SET", "other", "1"))
                self.assertIn("NOPERM", cli("h3pipe", "s3cret pass", "CONFIG", "SET", "appendonly", "no"))
                self.assertEqual(cli("keda", "keda-pw", "XLEN", "h3pipe:stream:sample"), "1")
                self.assertIn("NOPERM", cli("keda", "keda-pw", "XADD", "h3pipe:stream:sample", "*", "a", "b"))
                with open(os.path.join(d, "acl", "users.acl")) as f:
                    self.assertNotIn("s3cret", f.read(), "the ACL file holds digests, not passwords")
                # The compose healthcheck command, with the secret path pointed at the test file.
                hc = load_compose()["services"]["redis"]["healthcheck"]["test"][1]
                hc = hc.replace("$$", "$").replace("/run/secrets/redis_password", pw)
                hc = hc.replace("redis-cli", f"redis-cli -p {port}")
                self.assertEqual(subprocess.run(["sh", "-c", hc]).returncode, 0, hc)
            finally:
                proc.terminate()
                proc.wait(timeout=10)

    def test_redis_entrypoint_refuses_missing_secret(self):
        env = dict(os.environ, REDIS_PASSWORD_FILE="/nonexistent/pw", REDIS_ACL_DIR=tempfile.mkdtemp(),
                   REDIS_SERVER="true")
        r = subprocess.run(["sh", os.path.join(SRC, "configs/redis/entrypoint.sh")], env=env,
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot read the password file", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
