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
- Redis credentials: every h3pipe service gets exactly one Redis secret, its own service user's
  (H3PIPE_REDIS_USER / H3PIPE_REDIS_PASSWORD_FILE), distinct per service kind and defined in
  configs/redis/users.acl; no service gets redis-admin; Redis gets every service user's secret;
  the stunnel sidecars (redis-tls, redis-tunnel) use the shipped configs and their secrets.
- configs/redis/entrypoint.sh renders users.acl with render_acl.sh and starts a real
  redis-server: each service user logs in with its own password only, the default user is off,
  a service user is refused FLUSHALL/CONFIG, and the compose healthcheck command passes.

Usage: deploy_compose.py SOURCE_DIR [BIN_DIR]
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
# The Redis ACL user of each compose service (configs/redis/users.acl).
REDIS_USERS = {"encoder": "encoder", "sampler0": "sampler", "sampler1": "sampler", "decoder": "decoder",
               "transfer": "transfer", "cli": "operator", "api": "operator"}
# h3pipe-api's flags (services/api/main.cpp).
API_FLAGS = {"--config", "--state-dir", "--bind", "--port", "--max-body-bytes", "--port-file", "--run-file",
             "--ui-dir", "--host", "--metrics-port", "--metrics-bind", "--advertise-url"}
ACL_USERS = ("encoder", "sampler", "decoder", "transfer", "operator", "keda", "admin")


def acl_user_names():
    with open(os.path.join(SRC, "configs", "redis", "users.acl")) as f:
        return {line.split()[1] for line in f if line.startswith("user ")}


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

    def test_sentinel_override(self):
        """compose.sentinel.yaml: a primary, a replica and three Sentinels, all announcing the
        control host's address, the chart's scripts, and the Sentinel password for every service."""
        dc = shutil.which("docker-compose")
        files = ["-f", os.path.join(SRC, "compose.yaml"), "-f", os.path.join(SRC, "compose.sentinel.yaml")]
        env = dict(os.environ, H3PIPE_REDIS_ANNOUNCE_HOST="192.168.50.41")
        if not dc:
            print("docker-compose is not installed: compose.sentinel.yaml checked with PyYAML only")
            with open(os.path.join(SRC, "compose.sentinel.yaml")) as f:
                yaml.safe_load(f)
            return
        host_env = os.path.join(SRC, "deploy", "node241.env")
        r = subprocess.run([dc, "--env-file", host_env, *files, "config"], capture_output=True, text=True, cwd=SRC, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        svc = yaml.safe_load(r.stdout)["services"]
        nodes = "192.168.50.41:6379 192.168.50.41:6381"
        sentinels = "192.168.50.41:26379 192.168.50.41:26380 192.168.50.41:26381"
        scripts = {v.split(":")[1]: v.split(":")[0] for s in svc.values() for v in s.get("volumes", [])
                   if isinstance(v, str) and "h3pipe-sentinel" in v}
        for path, src in scripts.items():
            self.assertTrue(src.startswith(os.path.join(SRC, "helm", "h3pipe", "files")), src)
            self.assertTrue(os.path.isfile(src), src)
        for name, port in (("redis", "6379"), ("redis-replica", "6381")):
            s = svc[name]
            self.assertEqual(s["entrypoint"][-1], "/usr/local/etc/h3pipe-sentinel/redis-node.sh")
            e = s["environment"]
            self.assertEqual((e["REDIS_ANNOUNCE_HOST"], e["REDIS_ANNOUNCE_PORT"]), ("192.168.50.41", port))
            self.assertEqual((e["SENTINEL_ADDRESSES"], e["REDIS_BOOTSTRAP_PRIMARY"]), (sentinels, "192.168.50.41:6379"))
            self.assertEqual(e["REDIS_ENTRYPOINT"], "/usr/local/etc/redis/entrypoint.sh")
            self.assertIn("redis-admin.password", [x["source"] if isinstance(x, dict) else x for x in s["secrets"]])
        self.assertIn(f"{6381}", str(svc["redis-replica"]["ports"]))
        for i, port in enumerate(("26379", "26380", "26381"), 1):
            s = svc[f"sentinel-{i}"]
            e = s["environment"]
            self.assertEqual(s["profiles"], ["control"])
            self.assertEqual((e["SENTINEL_PORT"], e["SENTINEL_ADDRESSES"], e["REDIS_NODES"]), (port, sentinels, nodes))
            self.assertEqual(sorted(x["source"] if isinstance(x, dict) else x for x in s["secrets"]),
                             ["redis-admin.password", "redis-sentinel.password"], "only what a Sentinel needs")
            self.assertEqual(str(s["ports"][0]["published"] if isinstance(s["ports"][0], dict) else s["ports"][0]).split(":")[0], port)
            # Run as the secrets' owner (0400, uid 10001); write the config on a tmpfs the image has no
            # folder at and with a mode only (podman 4.3 refuses uid=, keeps an image folder's mode).
            self.assertEqual(s["user"], "10001:10001")
            tmpfs = [t.split(":")[0] for t in s["tmpfs"]]
            self.assertIn(e["SENTINEL_DIR"], tmpfs)
            self.assertNotIn("uid=", str(s["tmpfs"]))
        for name in H3PIPE_SERVICES:
            secrets = [x["source"] if isinstance(x, dict) else x for x in svc[name]["secrets"]]
            self.assertIn("redis-sentinel.password", secrets, name)
            self.assertNotIn("redis-admin.password", secrets, name)
        # Without the announce address it refuses, naming the variable.
        env.pop("H3PIPE_REDIS_ANNOUNCE_HOST")
        r = subprocess.run([dc, "--env-file", host_env, *files, "config"], capture_output=True, text=True, cwd=SRC, env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("H3PIPE_REDIS_ANNOUNCE_HOST", r.stderr)

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
            # The data connection's port in effect (config::Host::data_port): published too.
            data_port = hostcfg.get("transfer_data_port") or hostcfg["transfer_port"] + 1
            self.assertEqual(int(env["H3PIPE_TRANSFER_DATA_PORT"]), data_port)
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
                    user = REDIS_USERS[name]
                    self.assertEqual(svc["secrets"], [f"redis-{user}.password"], "one Redis secret: its own")
                    self.assertEqual(svc["environment"]["H3PIPE_REDIS_USER"], f"h3pipe-{user}")
                    self.assertEqual(svc["environment"]["H3PIPE_REDIS_PASSWORD_FILE"],
                                     f"/run/secrets/redis-{user}.password")
                    # Where Redis is for this host (a TLS tunnel): the environment, empty = the config's.
                    self.assertEqual(svc["environment"]["H3PIPE_REDIS_ADDRESS"], env.get("H3PIPE_REDIS_ADDRESS", ""))
                    if stage is None:  # transfer: one per host, no pool, the data port published
                        self.assertNotIn("--pool", flags)
                        tp = env["H3PIPE_TRANSFER_PORT"]
                        self.assertEqual(ports.get(tp), tp)
                        dp = env["H3PIPE_TRANSFER_DATA_PORT"]
                        self.assertEqual(ports.get(dp), dp, "the data port published")
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

    def test_each_service_has_its_own_redis_user(self):
        c = interpolate(load_compose(), dict(read_env(os.path.join(SRC, "deploy", "node241.env")),
                                             H3PIPE_REDIS_TLS_CONNECT="redis.example:6380"))
        services = c["services"]
        defined = acl_user_names()
        self.assertIn("default", defined)
        seen = {}
        for name, svc in services.items():
            secrets = [x if isinstance(x, str) else x["source"] for x in svc.get("secrets", [])]
            with self.subTest(service=name):
                self.assertNotIn("redis-admin.password", secrets if name != "redis" else [],
                                 "redis-admin is never given to a service")
                self.assertNotIn("redis_password", secrets, "the shared password is gone")
                env = svc.get("environment", {}) or {}
                if name not in REDIS_USERS:
                    self.assertNotIn("H3PIPE_REDIS_USER", env)
                    continue
                user = env["H3PIPE_REDIS_USER"]
                self.assertIn(user, defined, f"{user} is not a user of users.acl")
                self.assertNotEqual(user, "redis-admin")
                self.assertEqual(user, "h3pipe-" + REDIS_USERS[name])
                own = [x for x in secrets if x.startswith("redis")]
                self.assertEqual(own, [f"redis-{REDIS_USERS[name]}.password"])
                self.assertEqual(env["H3PIPE_REDIS_PASSWORD_FILE"], "/run/secrets/" + own[0])
                seen.setdefault(user, set()).add(name)
        # One user per kind of service: the two sampler slots share the sampler's user, nobody else.
        self.assertEqual(seen, {"h3pipe-encoder": {"encoder"}, "h3pipe-sampler": {"sampler0", "sampler1"},
                                "h3pipe-decoder": {"decoder"}, "h3pipe-transfer": {"transfer"},
                                "h3pipe-operator": {"cli", "api"}})
        # Redis renders the ACL file from every service user's secret (plus the admin's).
        redis = services["redis"]
        self.assertEqual(sorted(redis["secrets"]),
                         sorted(f"redis-{u}.password" for u in ACL_USERS if u != "keda"))
        hc = " ".join(redis["healthcheck"]["test"])
        self.assertIn("--user h3pipe-operator", hc)
        self.assertIn("/run/secrets/redis-operator.password", hc)
        for name in redis["secrets"]:
            self.assertTrue(c["secrets"][name]["file"].endswith("/" + name), name)
        # The stunnel sidecars: the shipped configs, the certificate secrets they name.
        tls, tunnel = services["redis-tls"], services["redis-tunnel"]
        self.assertEqual(tls["network_mode"], "service:redis")
        self.assertEqual(tls["profiles"], ["redis-tls"])
        self.assertIn("./configs/redis/stunnel-server.conf:/etc/stunnel/stunnel-server.conf:ro", tls["volumes"])
        self.assertIn("6380", [p.split(":")[-1] for p in redis["ports"]])
        self.assertEqual(tunnel["profiles"], ["redis-tunnel"])
        self.assertIn("./configs/redis/stunnel-client.conf:/etc/stunnel/stunnel-client.conf:ro", tunnel["volumes"])
        for svc, conf in ((tls, "stunnel-server.conf"), (tunnel, "stunnel-client.conf")):
            with open(os.path.join(SRC, "configs", "redis", conf)) as f:
                named = set(re.findall(r"/run/secrets/(\S+)", f.read()))
            self.assertEqual(named, set(svc["secrets"]), conf)
        self.assertIn("stunnel", dockerfile_targets())

    def test_redis_tunnel_rewrites_the_shipped_client_config(self):
        c = interpolate(load_compose(), dict(read_env(os.path.join(SRC, "deploy", "node292.env")),
                                             H3PIPE_REDIS_TLS_CONNECT="192.0.2.1:6380"))
        cmd = c["services"]["redis-tunnel"]["command"][0]
        script = cmd.split("| exec stunnel", 1)[0]
        env = dict(os.environ, H3PIPE_REDIS_TLS_CONNECT="192.0.2.1:6380")
        script = script.replace("/etc/stunnel/stunnel-client.conf", os.path.join(SRC, "configs/redis/stunnel-client.conf"))
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env).stdout
        self.assertIn("\naccept = 0.0.0.0:6379\n", out)
        self.assertIn("\nconnect = 192.0.2.1:6380\n", out)
        self.assertIn("\ncheckHost = redis.h3pipe.internal\n", out, "the server name is still checked")
        self.assertIn("\nverifyChain = yes\n", out)

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

    def test_api_service(self):
        """h3pipe-api in the control profile: its flags, loopback unless configured, the image's
        HEALTHCHECK on the API's /readyz, its metrics published and in the seeds' targets."""
        env = read_env(os.path.join(SRC, "deploy", "node241.env"))
        api = interpolate(load_compose(), env)["services"]["api"]
        self.assertEqual(api["profiles"], ["control"])
        self.assertEqual(api["image"], "h3pipe/api:0.1.0")
        flags = dict(a.split("=", 1) for a in api["command"])
        self.assertLessEqual(set(flags), API_FLAGS)
        if BIN and os.path.exists(os.path.join(BIN, "h3pipe-api")):
            helptext = subprocess.run([os.path.join(BIN, "h3pipe-api"), "--help"], capture_output=True, text=True).stdout
            for f in flags:
                self.assertIn(f, helptext, f"h3pipe-api takes no {f}")
        self.assertEqual(flags["--config"], "/etc/h3pipe/cluster.json")
        self.assertEqual(flags["--host"], "node241")
        self.assertEqual(api["environment"]["H3PIPE_HEALTH_PORT"], flags["--port"])
        published = {p.rsplit(":", 1)[1]: p.rsplit(":", 1)[0] for p in api["ports"]}
        self.assertEqual(published[flags["--port"]], "127.0.0.1:8088", "the API is published on loopback by default")
        self.assertIn(flags["--metrics-port"], published)
        other = interpolate(load_compose(), dict(env, H3PIPE_API_PUBLISH="8443"))["services"]["api"]
        self.assertIn("8443:8088", other["ports"])
        t = dockerfile_targets()["api"]
        self.assertEqual(t["from"], "runtime-base")
        self.assertIn('ENTRYPOINT ["h3pipe-api"]', t["lines"])
        self.assertIn("COPY --from=build /out/bin/h3pipe-api /usr/local/bin/", t["lines"])
        self.assertIn("USER 10001:10001", t["lines"])
        self.assertIn(f"ENV H3PIPE_HEALTH_PORT={flags['--port']}", t["lines"])
        self.assertTrue(any(l.startswith("HEALTHCHECK") and "h3pipe-healthcheck" in l for l in t["lines"]))
        build = " ".join(dockerfile_targets()["build"]["lines"])
        self.assertIn("h3pipe-api", build)
        with open(os.path.join(SRC, "configs", "prometheus", "targets", "seeds.json")) as f:
            targets = [t for g in json.load(f) for t in g["targets"]]
        self.assertIn("192.168.50.41:" + flags["--metrics-port"], targets)

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
        # The build stage installs only the build packages (no test toolchain, no npm).
        self.assertIn("scripts/setup.sh --build-only", " ".join(t["build"]["lines"]))
        # The chart's CURVE key hook Job runs curl in the CLI image (helm/h3pipe/files/curve-keys.sh).
        cli_installs = [l for l in t["cli"]["lines"] if "apt-get install" in l]
        self.assertTrue(cli_installs and " curl" in cli_installs[0], cli_installs)
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
            secrets = os.path.join(d, "secrets")
            os.makedirs(secrets)
            pw = {u: f"{u} s3cret" for u in ACL_USERS if u != "keda"}  # keda: no secret -> off
            for u, p in pw.items():
                with open(os.path.join(secrets, f"redis-{u}.password"), "w") as f:
                    f.write(p + "\n")
            os.makedirs(os.path.join(d, "data"))
            port = free_port()
            env = dict(os.environ, REDIS_CONF=os.path.join(SRC, "configs/redis/redis.conf"),
                       REDIS_ACL_DIR=os.path.join(d, "acl"), REDIS_SECRETS_DIR=secrets, REDIS_SERVER="redis-server")
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
                op = ("h3pipe-operator", pw["operator"])
                deadline = time.time() + 20
                while time.time() < deadline and cli(*op, "PING") != "PONG":
                    time.sleep(0.05)
                self.assertEqual(cli(*op, "PING"), "PONG")
                self.assertIn("NOAUTH", cli(None, None, "PING"), "the default user must be off")
                self.assertIn("aof_enabled:1", cli(*op, "INFO", "persistence"))
                for u in ("encoder", "sampler", "decoder", "transfer"):
                    with self.subTest(user=u):
                        self.assertEqual(cli(f"h3pipe-{u}", pw[u], "PING"), "PONG")
                        other = pw["sampler" if u != "sampler" else "decoder"]
                        # redis-cli reports the failed AUTH on stderr; the PING then gets NOAUTH.
                        self.assertIn("NOAUTH", cli(f"h3pipe-{u}", other, "PING"), "only its own password")
                        self.assertIn("NOPERM", cli(f"h3pipe-{u}", pw[u], "FLUSHALL"))
                        self.assertIn("NOPERM", cli(f"h3pipe-{u}", pw[u], "CONFIG", "GET", "appendonly"))
                self.assertRegex(cli("h3pipe-sampler", pw["sampler"], "XADD", "h3pipe:stream:decode@b", "*", "a", "b"),
                                 r"^\d+-\d+$")
                self.assertIn("NOPERM", cli("h3pipe-sampler", pw["sampler"], "SET", "other", "1"))
                self.assertIn("NOAUTH", cli("h3pipe-keda", "anything", "PING"), "no secret: rendered off")
                self.assertEqual(cli("redis-admin", pw["admin"], "CONFIG", "GET", "busy-reply-threshold"),
                                 "busy-reply-threshold\n5000", "acl.conf is included")
                with open(os.path.join(d, "acl", "users.acl")) as f:
                    text = f.read()
                for p in pw.values():
                    self.assertNotIn(p, text, "the ACL file holds digests, not passwords")
                self.assertEqual(os.stat(os.path.join(d, "acl", "users.acl")).st_mode & 0o777, 0o600)
                # The compose healthcheck command, with the secret path pointed at the test file.
                hc = load_compose()["services"]["redis"]["healthcheck"]["test"][1]
                hc = hc.replace("$$", "$").replace("/run/secrets/", secrets + "/")
                hc = hc.replace("redis-cli", f"redis-cli -p {port}")
                self.assertEqual(subprocess.run(["sh", "-c", hc]).returncode, 0, hc)
            finally:
                proc.terminate()
                proc.wait(timeout=10)

    def test_redis_entrypoint_refuses_missing_secret(self):
        env = dict(os.environ, REDIS_SECRETS_DIR="/nonexistent", REDIS_ACL_DIR=tempfile.mkdtemp(),
                   REDIS_SERVER="true")
        r = subprocess.run(["sh", os.path.join(SRC, "configs/redis/entrypoint.sh")], env=env,
                           capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot read the password file", r.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
