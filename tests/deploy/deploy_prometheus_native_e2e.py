#!/usr/bin/python3
"""A real Prometheus scrapes a native stack (`h3pipe start`) through the targets file that start
writes (issue #34 P5, item 4), and keeps scraping every service after a `kill -9` of it.

1. A two-host sim config (a rehearsal: no GPU): host "a" runs the encoder (no metrics port in
   the config: a free one, kept across restarts), a sampler (a fixed metrics_port) and the
   transfer service; host "b" (the decoder) is never started here.  `h3pipe start --host a`.
2. <state_dir>/prometheus/targets.json (written by start) lists a's three services, labelled
   host, service, pool; `h3pipe prometheus targets --host a -o FILE` writes the same document, and
   without --host it exits 2 naming the fields b's services lack.
3. /usr/bin/prometheus with configs/prometheus/prometheus.yml (1 s intervals), its file_sd pointed
   at that file: every target up, with those labels; H3pipeGpuMissing's expression is empty
   although each service exports h3pipe_gpu_available 0 (no driver here): their pools use no GPU.
4. kill -9 of the encoder and of the transfer service: the supervisor restarts each on the same
   port (stack.json, its run file), the targets file is unchanged, and Prometheus scrapes the new
   process there (a scrape after the restart, healthy).
5. A kept port another process took while the service was down (the supervisor stopped with
   SIGSTOP meanwhile): the service is started on a free port again, not crash-looped on it.

Usage: deploy_prometheus_native_e2e.py SOURCE_DIR BIN_DIR
"""
import calendar
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

SRC, BIN = (os.path.abspath(a) for a in sys.argv[1:3]) if len(sys.argv) >= 3 else (None, None)
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def wait_for(what, cond, timeout=60, period=0.2):
    deadline = time.time() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(period)


class NativeStackScrape(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not SRC:
            raise unittest.SkipTest("usage: deploy_prometheus_native_e2e.py SOURCE_DIR BIN_DIR")
        if not os.access(PROMETHEUS, os.X_OK):
            raise unittest.SkipTest("prometheus is not installed")
        cls.tmp = tempfile.mkdtemp(prefix="h3pipe_promnative_")
        cls.state = os.path.join(cls.tmp, "state")
        cls.sampler_port = free_port()
        cfg = {
            "name": "promnative", "state_dir": cls.state, "time_scale": 0.01,
            "artifact_root": os.path.join(cls.state, "artifacts"),
            "output_root": os.path.join(cls.state, "outputs"),
            "transfer": {"curve": False},
            "classes": [{"name": "small", "width": 128, "height": 96, "frames": 25, "steps": 6}],
            "hosts": [{"name": "a"}, {"name": "b", "transfer_port": free_port()}],
            "pools": [
                {"name": "enc", "host": "a", "stage": "encode", "gpus": [0],
                 "profiles": {"small": {"kind": "fixed", "seconds": 5}}},
                {"name": "s0", "host": "a", "stage": "sample", "gpus": [0],
                 "metrics_port": cls.sampler_port,
                 "profiles": {"small": {"kind": "fixed", "seconds": 100}}},
                {"name": "dec", "host": "b", "stage": "decode",
                 "profiles": {"small": {"kind": "fixed", "seconds": 20}}},
            ],
        }
        cls.cfg = os.path.join(cls.tmp, "cluster.json")
        with open(cls.cfg, "w") as f:
            json.dump(cfg, f)
        cls.h3 = os.path.join(BIN, "h3pipe")
        r = cls.cli("start", "--host", "a")
        assert r.returncode == 0, f"start failed:\n{r.stdout}{r.stderr}"
        cls.start_out = r.stdout
        cls.targets = os.path.join(cls.state, "prometheus", "targets.json")

        with open(os.path.join(SRC, "configs/prometheus/prometheus.yml")) as f:
            pcfg = yaml.safe_load(f)
        pcfg["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
        pcfg["rule_files"] = [os.path.join(SRC, "configs/prometheus", r) for r in pcfg["rule_files"]]
        job = [j for j in pcfg["scrape_configs"] if j["job_name"] == "h3pipe"][0]
        job["file_sd_configs"] = [{"files": [cls.targets], "refresh_interval": "1s"}]
        pcfg["scrape_configs"] = [job]
        pfile = os.path.join(cls.tmp, "prometheus.yml")
        with open(pfile, "w") as f:
            yaml.safe_dump(pcfg, f)
        cls.port = free_port()
        cls.api = f"http://127.0.0.1:{cls.port}"
        cls.log = open(os.path.join(cls.tmp, "prometheus.log"), "w")
        cls.prom = subprocess.Popen([PROMETHEUS, f"--config.file={pfile}",
                                     f"--storage.tsdb.path={os.path.join(cls.tmp, 'data')}",
                                     f"--web.listen-address=127.0.0.1:{cls.port}", "--log.level=warn"],
                                    stdout=cls.log, stderr=subprocess.STDOUT)

    @classmethod
    def cli(cls, *args):
        return subprocess.run([cls.h3, "--config", cls.cfg, *args], capture_output=True, text=True,
                              timeout=120)

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "h3", None):
            cls.cli("stop")
        p = getattr(cls, "prom", None)
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        if getattr(cls, "log", None):
            cls.log.close()
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def active_targets(self):
        try:
            return get(self.api + "/api/v1/targets?state=active")["data"]["activeTargets"]
        except (urllib.error.URLError, ConnectionError, KeyError):
            return []

    def stack(self):
        with open(os.path.join(self.state, "stack.json")) as f:
            return {p["name"]: p for p in json.load(f)["processes"]}

    def run_file(self, name):
        with open(os.path.join(self.state, "run", name + ".json")) as f:
            return json.load(f)

    def query(self, expr):
        return get(self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]

    def test_1_targets_file(self):
        with open(self.targets) as f:
            groups = json.load(f)
        labels = sorted((g["labels"]["service"], g["labels"].get("pool"), g["labels"]["host"]) for g in groups)
        # h3pipe-api (docs/api.md, "Metrics") too: start runs it when it is built.
        api = [("api", None, "a")] if os.path.exists(os.path.join(BIN, "h3pipe-api")) else []
        self.assertEqual(labels, api + [("encoder", "enc", "a"), ("sampler", "s0", "a"), ("transfer", None, "a")])
        ports = {g["labels"]["service"]: int(g["targets"][0].rsplit(":", 1)[1]) for g in groups}
        self.assertEqual(ports["sampler"], self.sampler_port)
        # The supervisor records each port in stack.json once the service's run file names it.
        st = wait_for("stack.json's ports", lambda: (lambda s: s if all(
            s[n]["metrics_port"] for n in ("encoder-enc", "sampler-s0", "transfer-a")) else None)(self.stack()))
        self.assertEqual(ports["encoder"], st["encoder-enc"]["metrics_port"])
        self.assertEqual(ports["transfer"], st["transfer-a"]["metrics_port"])
        if api:
            self.assertEqual(ports["api"], self.run_file("api-a")["metrics_port"])
        self.assertIn("prometheus " + self.targets, self.start_out)
        self.assertEqual(os.stat(self.targets).st_mode & 0o777, 0o644)
        # The CLI writes the same document for host a; for the whole config it names what b lacks.
        out = os.path.join(self.tmp, "cli_targets.json")
        r = self.cli("prometheus", "targets", "--host", "a", "-o", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertEqual(json.load(f), groups)
        r = self.cli("prometheus", "targets")
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn("b/decoder-dec: no fixed metrics port; set /pools/2/metrics_port", r.stderr)
        self.assertIn("b/transfer-b: no fixed metrics port; set /hosts/1/transfer_metrics_port", r.stderr)
        self.assertNotIn("api", r.stderr, "an API without a known port is left out, never missing")

    def test_2_scraped_and_kept_after_kill(self):
        def all_up():
            t = self.active_targets()
            want = 4 if os.path.exists(os.path.join(BIN, "h3pipe-api")) else 3  # with h3pipe-api
            return t if len(t) == want and all(x["health"] == "up" for x in t) else None
        targets = wait_for("Prometheus to scrape a's services", all_up, timeout=90)
        by_service = {t["labels"]["service"]: t for t in targets}
        self.assertEqual(by_service["sampler"]["labels"]["pool"], "s0")
        self.assertEqual(by_service["encoder"]["labels"]["host"], "a")
        # A rehearsal without GPUs: each stage service says h3pipe_gpu_available 0, no alert.
        wait_for("h3pipe_gpu_available series", lambda: len(self.query("h3pipe_gpu_available == 0")) == 2)
        with open(os.path.join(SRC, "configs/prometheus/alerts.yml")) as f:
            rules = {r["alert"]: r for g in yaml.safe_load(f)["groups"] for r in g["rules"]}
        self.assertEqual(self.query(rules["H3pipeGpuMissing"]["expr"]), [])
        with open(self.targets) as f:
            before = f.read()

        for name, service in (("encoder-enc", "encoder"), ("transfer-a", "transfer")):
            with self.subTest(killed=name):
                old = self.stack()[name]
                os.kill(old["pid"], signal.SIGKILL)
                killed_at = time.time()
                new = wait_for(f"{name} restarted", lambda: (lambda p: p if p["pid"] != old["pid"]
                               and p["restarts"] > old["restarts"] else None)(self.stack()[name]))
                self.assertEqual(new["metrics_port"], old["metrics_port"])
                run = wait_for(f"{name}'s new run file",
                               lambda: (lambda r: r if r["pid"] == new["pid"] else None)(self.run_file(name)))
                self.assertEqual(run["metrics_port"], old["metrics_port"])

                def scraped_again():
                    for t in self.active_targets():
                        if t["labels"]["service"] != service:
                            continue
                        # RFC 3339 (UTC) with nanoseconds; whole seconds after the kill.
                        ts = calendar.timegm(time.strptime(t["lastScrape"][:19], "%Y-%m-%dT%H:%M:%S"))
                        if t["health"] == "up" and ts > killed_at + 1:
                            return t
                    return None
                t = wait_for(f"a healthy scrape of {name} after its restart", scraped_again, timeout=60)
                self.assertTrue(t["scrapeUrl"].endswith(f":{old['metrics_port']}/metrics"), t["scrapeUrl"])
        with open(self.targets) as f:
            self.assertEqual(f.read(), before, "the targets file still names the same ports")

    def test_3_port_taken_while_down(self):
        """Another process took the kept port while the service was down: the runner exits 98 and
        the supervisor starts it on a free port again (rather than crash-looping on it)."""
        with open(os.path.join(self.state, "stack.json")) as f:
            supervisor = json.load(f)["supervisor_pid"]
        old = self.stack()["encoder-enc"]
        squatter = socket.socket()
        self.addCleanup(squatter.close)
        os.kill(supervisor, signal.SIGSTOP)  # no restart until the port is taken
        try:
            os.kill(old["pid"], signal.SIGKILL)
            wait_for("the encoder's death", lambda: not os.path.exists(f"/proc/{old['pid']}/cmdline")
                     or open(f"/proc/{old['pid']}/stat").read().split()[2] == "Z")
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

            def take():  # a connection of the dead process may hold the port a moment longer
                try:
                    squatter.bind(("127.0.0.1", old["metrics_port"]))
                    return True
                except OSError:
                    return False
            wait_for("the kept port free to take", take, timeout=30)
            squatter.listen(1)
        finally:
            os.kill(supervisor, signal.SIGCONT)
        new = wait_for("the encoder on a free port", lambda: (lambda p: p if p["metrics_port"] not in (0, old["metrics_port"])
                       and p["pid"] != old["pid"] else None)(self.stack()["encoder-enc"]))
        run = wait_for("its run file", lambda: (lambda r: r if r["pid"] == new["pid"] else None)(self.run_file("encoder-enc")))
        self.assertEqual(run["metrics_port"], new["metrics_port"])
        with urllib.request.urlopen(f"http://127.0.0.1:{new['metrics_port']}/metrics", timeout=5) as r:
            self.assertIn(b"h3pipe_pool_gpus", r.read())
        with open(os.path.join(self.state, "supervisor.log")) as f:
            self.assertIn(f"encoder-enc: metrics port {old['metrics_port']} is taken; restarting on a free one", f.read())


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
