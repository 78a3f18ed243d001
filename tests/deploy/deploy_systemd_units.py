#!/usr/bin/python3
"""`h3pipe systemd units` (issue #34 item 9): the units of the seeds' two hosts, checked as systemd
would without systemd as init, and their command lines run as systemd would run them.

1. The seeds' host map through config-adapt (a managed shared Redis on node-241 behind TLS, as the
   docs' two-host recipe makes it), `h3pipe credentials init`, then `systemd units` for each host
   with this build's binaries (--bin-dir).  Also deploy/cluster.seeds.json (an external Redis: no
   Redis unit) and a variant whose sample stage runs on the GPUs (builtin runtime).
2. `systemd-analyze verify` on every host's units (ExecStart binaries exist, directives valid) and
   `systemd-analyze security --offline=yes --threshold=40` on each service: exposure <= 4.0 "OK".
3. What they say: Type=notify, Restart=on-failure, a 30 min start timeout, NoNewPrivileges,
   ProtectSystem=strict with the three roots writable, PrivateTmp, ProtectHome; a GPU pool gets
   DevicePolicy=closed + DeviceAllow=char-nvidia* and neither PrivateDevices (it hides the GPUs)
   nor MemoryDenyWriteExecute (CUDA's JIT); services on node-292 reach Redis through the tunnel.
4. node-241's units run as systemd runs them: the Redis unit's ExecStartPre (`systemd prepare`:
   the ACL and stunnel files), its ExecStart with NOTIFY_SOCKET (redis-server --supervised
   systemd sends READY=1), then the decoder unit's ExecStart with its Environment=: READY=1 arrives
   on a real AF_UNIX datagram socket only once its /readyz answers 200; SIGTERM -> STOPPING=1;
   then the API unit's (h3pipe-api, Type=exec): its /readyz answers 200 through the shared Redis.
   A host with api_tls_cert/api_tls_key gets --tls-cert/--tls-key in its API unit.
5. The embedded config is refused (exit 2) naming /redis/embedded.
6. `start --all --launcher systemd --dry-run`: `h3pipe systemd install` on each host over ssh,
   the Redis host first; `stop --all`: `systemctl stop h3pipe.target`, the Redis host last.

Usage: deploy_systemd_units.py SOURCE_DIR BIN_DIR          (exit 77: systemd-analyze missing)
"""
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

SRC, BIN = (os.path.abspath(a) for a in sys.argv[1:3]) if len(sys.argv) >= 3 else (None, None)
ANALYZE = shutil.which("systemd-analyze") or "/usr/bin/systemd-analyze"


def unit(path):
    """{key: [values]} of a unit file, sections merged."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line[0] in "#[":
                continue
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


class Units(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="h3pipe_systemd_")
        cls.h3 = os.path.join(BIN, "h3pipe")
        r = subprocess.run([cls.h3, "config-adapt", os.path.join(SRC, "configs/hostmaps/seeds_two_host.json"),
                            "-o", os.path.join(cls.tmp, "adapted.json")], capture_output=True, text=True, cwd=cls.tmp)
        assert r.returncode == 0, r.stderr
        with open(os.path.join(cls.tmp, "adapted.json")) as f:
            cfg = json.load(f)
        assert cfg["redis"]["managed"] and not cfg["redis"].get("allow_plaintext"), cfg["redis"]
        cfg.update(state_dir=os.path.join(cls.tmp, "state"), artifact_root=os.path.join(cls.tmp, "artifacts"),
                   output_root=os.path.join(cls.tmp, "outputs"))
        cfg["redis"]["credentials_dir"] = os.path.join(cls.tmp, "credentials")
        cls.cfg = os.path.join(cls.tmp, "cluster.json")
        with open(cls.cfg, "w") as f:
            json.dump(cfg, f, indent=1)
        gpu = json.loads(json.dumps(cfg))
        gpu["stages"]["sample"]["runtime"] = {"name": "builtin", "settings": {}}
        cls.gpu_cfg = os.path.join(cls.tmp, "gpu.json")
        with open(cls.gpu_cfg, "w") as f:
            json.dump(gpu, f)
        r = subprocess.run([cls.h3, "--config", cls.cfg, "credentials", "init"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        cls.hosts = [h["name"] for h in cfg["hosts"]]
        cls.redis_host = "node-241"
        cls.dirs = {h: cls.render(cls.cfg, h, "units-" + h) for h in cls.hosts}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    @classmethod
    def render(cls, cfg, host, out):
        d = os.path.join(cls.tmp, out)
        r = subprocess.run([cls.h3, "--config", cfg, "systemd", "units", "--host", host, "-o", d,
                            "--bin-dir", BIN, "--user", "h3pipe"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        return d

    def files(self, d):
        return sorted(os.path.join(d, f) for f in os.listdir(d))

    def test_verify_and_security(self):
        dirs = dict(self.dirs)
        dirs["seeds-external-redis"] = self.render(os.path.join(SRC, "deploy/cluster.seeds.json"), "node241", "seeds")
        dirs["gpu"] = self.render(self.gpu_cfg, "node-292", "gpu")
        for name, d in dirs.items():
            with self.subTest(units=name):
                r = subprocess.run([ANALYZE, "verify", *self.files(d)], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(r.stdout + r.stderr, "", "verify says nothing about good units")
                for f in self.files(d):
                    if not f.endswith(".service"):
                        continue
                    r = subprocess.run([ANALYZE, "security", "--offline=yes", "--threshold=40", f],
                                       capture_output=True, text=True)
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                    last = r.stdout.strip().splitlines()[-1]
                    exposure = float(last.split(":")[-1].split()[0])
                    self.assertLessEqual(exposure, 4.0, f"{f}: {last}")
                    self.assertIn(" OK", last)
        self.assertNotIn("h3pipe-redis.service", os.listdir(dirs["seeds-external-redis"]),
                         "an external Redis is not the units' to run")

    def test_what_the_units_say(self):
        names = {h: sorted(os.listdir(d)) for h, d in self.dirs.items()}
        self.assertEqual(names["node-241"], ["h3pipe-api-node-241.service", "h3pipe-decoder-node-241-decode.service",
                                             "h3pipe-redis-tls.service", "h3pipe-redis.service",
                                             "h3pipe-transfer-node-241.service", "h3pipe.target"])
        self.assertEqual(names["node-292"], ["h3pipe-api-node-292.service", "h3pipe-encoder-node-292-encode.service",
                                             "h3pipe-redis-tls.service", "h3pipe-sampler-node-292-sample.service",
                                             "h3pipe-transfer-node-292.service", "h3pipe.target"])
        state = os.path.join(self.tmp, "state")
        for host, d in self.dirs.items():
            target = unit(os.path.join(d, "h3pipe.target"))
            self.assertEqual(target["WantedBy"], ["multi-user.target"])
            for f in names[host]:
                if not f.startswith("h3pipe-") or not f.endswith(".service") or "redis" in f:
                    continue
                with self.subTest(host=host, unit=f):
                    u = unit(os.path.join(d, f))
                    self.assertIn(f, target["Wants"][0].split())
                    api = f.startswith("h3pipe-api-")  # no READY=1: Type=exec
                    for k, v in (("Type", "exec" if api else "notify"), ("NotifyAccess", None if api else "main"),
                                 ("Restart", "on-failure"),
                                 ("TimeoutStartSec", "30min"), ("NoNewPrivileges", "yes"),
                                 ("ProtectSystem", "strict"), ("PrivateTmp", "yes"), ("ProtectHome", "yes"),
                                 ("PrivateDevices", "yes"), ("User", "h3pipe"),
                                 ("RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6")):
                        self.assertEqual(u.get(k), None if v is None else [v], k)
                    self.assertEqual(u["ReadWritePaths"], ["-" + state, "-" + os.path.join(self.tmp, "artifacts"),
                                                           "-" + os.path.join(self.tmp, "outputs")])
                    argv = shlex.split(u["ExecStart"][0])
                    self.assertEqual(os.path.dirname(argv[0]), BIN)
                    sock = "redis.sock" if host == self.redis_host else "tunnel.sock"
                    if api:  # the operator's login, Redis where the services reach it, its run file
                        self.assertEqual(argv[1:5], ["--config", self.cfg, "--host", host])
                        self.assertEqual(argv[argv.index("--run-file") + 1], os.path.join(state, "run", f"api-{host}.json"))
                        self.assertIn("H3PIPE_REDIS_USER=h3pipe-operator", u["Environment"])
                        self.assertNotIn("--tls-cert", argv)
                    self.assertEqual(argv[argv.index("--redis") + 1], os.path.join(state, "redis", sock))
                    self.assertIn("After", u)
                    self.assertIn("h3pipe-redis-tls.service", u["After"][0])
        redis = unit(os.path.join(self.dirs["node-241"], "h3pipe-redis.service"))
        self.assertEqual(redis["Type"], ["notify"])
        argv = shlex.split(redis["ExecStart"][0])
        self.assertEqual(argv[argv.index("--supervised") + 1], "systemd")
        self.assertEqual(argv[argv.index("--port") + 1], "0", "TLS: Redis itself on its socket only")
        self.assertIn("prepare", redis["ExecStartPre"][0])
        # Its prepare makes redis-admin.password on the Redis host (it never leaves it).
        self.assertEqual(redis["ReadWritePaths"], ["-" + os.path.join(state, "redis"),
                                                   "-" + os.path.join(self.tmp, "credentials")])
        # The host's own certificate for its API (api_tls_cert/api_tls_key): the unit passes it.
        with open(self.cfg) as f:
            tls = json.load(f)
        tls["hosts"][0].update(api_tls_cert=os.path.join(self.tmp, "api-cert.pem"),
                               api_tls_key=os.path.join(self.tmp, "api-key.pem"))
        tls_cfg = os.path.join(self.tmp, "tls.json")
        with open(tls_cfg, "w") as f:
            json.dump(tls, f)
        host0 = tls["hosts"][0]["name"]
        api = unit(os.path.join(self.render(tls_cfg, host0, "tls-check"), f"h3pipe-api-{host0}.service"))
        argv = shlex.split(api["ExecStart"][0])
        self.assertEqual(argv[argv.index("--tls-cert") + 1], os.path.join(self.tmp, "api-cert.pem"))
        self.assertEqual(argv[argv.index("--tls-key") + 1], os.path.join(self.tmp, "api-key.pem"))
        gpu = unit(os.path.join(self.render(self.gpu_cfg, "node-292", "gpu-check"),
                                "h3pipe-sampler-node-292-sample.service"))
        self.assertEqual(gpu["DevicePolicy"], ["closed"])
        self.assertEqual(gpu["DeviceAllow"], ["char-nvidia* rw"])
        self.assertNotIn("PrivateDevices", gpu)
        self.assertNotIn("MemoryDenyWriteExecute", gpu)

    def test_start_all_launcher_systemd(self):
        """start --all --launcher systemd: `h3pipe systemd install` on each host over ssh, the Redis
        host first; stop --all: systemctl stop h3pipe.target, the Redis host last."""
        def plan(action):
            r = subprocess.run([self.h3, "--config", self.cfg, action, "--all", "--launcher", "systemd",
                                "--remote-config", "/etc/h3pipe/cluster.json", "--dry-run"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            return [l.split("\t") for l in r.stdout.splitlines() if not l.startswith("#")]
        start = plan("start")
        self.assertEqual([h for h, _ in start], ["node-241", "node-292"])
        for host, cmd in start:
            self.assertTrue(cmd.endswith(f"h3pipe systemd install --host {host} --config /etc/h3pipe/cluster.json"), cmd)
            self.assertIn(" -o BatchMode=yes ", cmd)
        stop = plan("stop")
        self.assertEqual([h for h, _ in stop], ["node-292", "node-241"])
        self.assertTrue(all(c.endswith(" systemctl stop h3pipe.target") for _, c in stop), stop)

    def test_embedded_config_refused(self):
        r = subprocess.run([self.h3, "systemd", "units", "--host", "local", "-o", os.path.join(self.tmp, "x"),
                            "--config", os.path.join(SRC, "configs/local.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("/redis/embedded is true", r.stderr)

    def test_units_run_as_systemd_runs_them(self):
        d = self.dirs["node-241"]
        redis = unit(os.path.join(d, "h3pipe-redis.service"))
        r = subprocess.run(shlex.split(redis["ExecStartPre"][0]), capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        state = os.path.join(self.tmp, "state")
        self.assertTrue(os.path.exists(os.path.join(state, "redis", "users.acl")))
        self.assertTrue(os.path.exists(os.path.join(state, "redis", "stunnel-server.conf")))
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "credentials", "redis-admin.password")))
        procs = []
        try:
            rsock, rpath = self.listen("redis")
            procs.append(subprocess.Popen(shlex.split(redis["ExecStart"][0]), env=dict(os.environ, NOTIFY_SOCKET=rpath),
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self.assertIn("READY=1", self.until(rsock, "READY=1")[-1], "redis-server --supervised systemd")

            dec = unit(os.path.join(d, "h3pipe-decoder-node-241-decode.service"))
            env = dict(os.environ)
            for e in dec.get("Environment", []):
                k, v = e.split("=", 1)
                env[k] = v
            dsock, dpath = self.listen("decoder")
            env["NOTIFY_SOCKET"] = "@" + dpath  # the abstract namespace, as systemd may give it
            log = open(os.path.join(self.tmp, "decoder.log"), "w")
            self.addCleanup(log.close)
            procs.append(subprocess.Popen(shlex.split(dec["ExecStart"][0]), env=env, stdout=log, stderr=log))
            msgs = self.until(dsock, "READY=1")
            self.assertTrue(msgs[0].startswith("STATUS=decoder node-241-decode on node-241"), msgs)
            # READY=1 came once /readyz said 200: it still does.
            with open(os.path.join(state, "run", "decoder-node-241-decode.json")) as f:
                rf = json.load(f)
            with urllib.request.urlopen(f"http://127.0.0.1:{rf['health_port']}/readyz", timeout=5) as resp:
                self.assertEqual(resp.status, 200)
            self.assertIn(f"ready, metrics :{rf['metrics_port']}", msgs[-1])
            procs[-1].send_signal(signal.SIGTERM)
            self.until(dsock, "STOPPING=1")
            self.assertEqual(procs[-1].wait(timeout=30), 0)

            # The API unit's command line with its Environment=: it reaches the shared Redis as
            # the operator and its /readyz (200 once Redis answers) is on the port of its run file.
            api = unit(os.path.join(d, "h3pipe-api-node-241.service"))
            env = dict(os.environ)
            for e in api.get("Environment", []):
                k, v = e.split("=", 1)
                env[k] = v
            run_file = os.path.join(state, "run", "api-node-241.json")
            alog = open(os.path.join(self.tmp, "api.log"), "w")
            self.addCleanup(alog.close)
            procs.append(subprocess.Popen(shlex.split(api["ExecStart"][0]), env=env, stdout=alog, stderr=alog))
            deadline, status = time.time() + 60, None
            while time.time() < deadline and status != 200:
                time.sleep(0.1)
                try:
                    with open(run_file) as f:
                        rf = json.load(f)
                    with urllib.request.urlopen(f"http://127.0.0.1:{rf['health_port']}/readyz", timeout=5) as resp:
                        status = resp.status
                except (OSError, ValueError, urllib.error.URLError):
                    continue
            if status != 200:
                with open(os.path.join(self.tmp, "api.log")) as f:
                    self.fail(f"the API unit's /readyz did not answer 200: {f.read()}")
            self.assertEqual(rf["api_url"], f"http://127.0.0.1:{rf['health_port']}/v1")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(timeout=30)

    def listen(self, name):
        path = os.path.join(self.tmp, f"notify-{name}")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if name == "decoder":
            s.bind("\0" + path)  # abstract
        else:
            s.bind(path)
        s.settimeout(0.5)
        self.addCleanup(s.close)
        return s, path

    def until(self, s, what, timeout=60):
        msgs, deadline = [], time.time() + timeout
        while time.time() < deadline:
            try:
                m = s.recv(4096).decode()
            except socket.timeout:
                continue
            msgs.append(m)
            if what in m:
                return msgs
        raise AssertionError(f"no {what!r} within {timeout} s; got {msgs}")


if __name__ == "__main__":
    if not SRC:
        sys.exit("usage: deploy_systemd_units.py SOURCE_DIR BIN_DIR")
    if not os.access(ANALYZE, os.X_OK):
        print("systemd-analyze is missing (Debian package systemd; scripts/setup.sh installs it)")
        sys.exit(77)
    unittest.main(argv=sys.argv[:1], verbosity=2)
