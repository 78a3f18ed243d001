#!/usr/bin/python3
"""A real Prometheus scrapes the metric families the services export, and every alert expression
and every dashboard query is evaluated through its HTTP API.

1. Starts tests/deploy/metrics_fixture (WorkerProbe for encode/sample/decode, the GPU monitor
   over the fake NVML, the transfer probe, the dead-letter gauge) on a free port.
2. Starts /usr/bin/prometheus on a free port with configs/prometheus/prometheus.yml adapted for
   the test: 1 s scrape and evaluation intervals, the file_sd target file pointing at the fixture
   (labelled host=node292 as in configs/prometheus/targets), the repository's alerts.yml.
3. Waits (deadline) for a few scrapes, then checks:
   - the scrape config's honor_labels: WorkerProbe series keep their own host label, GPU and
     transfer series (which carry none) get the target's;
   - every alert rule: its expression evaluates without error, and Prometheus's own evaluation of
     the rule reports health "ok";
   - every Grafana panel query (variables substituted: $host=.*, $__rate_interval=30s) evaluates
     without error and returns data; the dashboard's host variable query finds the host.

Usage: deploy_prometheus_e2e.py SOURCE_DIR FIXTURE_BINARY FAKE_NVML_LIBRARY
"""
import json
import os
import shutil
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

SRC, FIXTURE, FAKE_NVML = (os.path.abspath(a) for a in sys.argv[1:4]) if len(sys.argv) >= 4 else (None,) * 3
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
VARS = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "1m", "$host": ".*"}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class PrometheusE2E(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not SRC:
            raise unittest.SkipTest("usage: deploy_prometheus_e2e.py SOURCE_DIR FIXTURE FAKE_NVML")
        if not os.access(PROMETHEUS, os.X_OK):
            raise unittest.SkipTest("prometheus is not installed")
        cls.tmp = tempfile.mkdtemp(prefix="h3pipe_prom_")
        env = dict(os.environ, FAKE_NVML_DEVICES="4")
        cls.fixture = subprocess.Popen([FIXTURE, "--nvml", FAKE_NVML, "--host", "node292"],
                                       stdout=subprocess.PIPE, text=True, env=env)
        line = cls.fixture.stdout.readline().split()
        assert line and line[0] == "PORT", f"fixture said {line}"
        cls.target_port = int(line[1])

        with open(os.path.join(SRC, "configs/prometheus/prometheus.yml")) as f:
            cfg = yaml.safe_load(f)
        cfg["global"]["scrape_interval"] = "1s"
        cfg["global"]["scrape_timeout"] = "1s"
        cfg["global"]["evaluation_interval"] = "1s"
        cfg["rule_files"] = [os.path.join(SRC, "configs/prometheus", r) for r in cfg["rule_files"]]
        job = [j for j in cfg["scrape_configs"] if j["job_name"] == "h3pipe"][0]
        targets = os.path.join(cls.tmp, "targets.json")
        with open(targets, "w") as f:
            json.dump([{"targets": [f"127.0.0.1:{cls.target_port}"], "labels": {"host": "node292"}}], f)
        job["file_sd_configs"] = [{"files": [targets], "refresh_interval": "1s"}]
        cfg["scrape_configs"] = [job]
        cfg_file = os.path.join(cls.tmp, "prometheus.yml")
        with open(cfg_file, "w") as f:
            yaml.safe_dump(cfg, f)
        cls.port = free_port()
        cls.api = f"http://127.0.0.1:{cls.port}"
        cls.log = open(os.path.join(cls.tmp, "prometheus.log"), "w")
        cls.prom = subprocess.Popen([PROMETHEUS, f"--config.file={cfg_file}",
                                     f"--storage.tsdb.path={os.path.join(cls.tmp, 'data')}",
                                     f"--web.listen-address=127.0.0.1:{cls.port}", "--log.level=warn"],
                                    stdout=cls.log, stderr=subprocess.STDOUT)
        # Ready, and at least 8 scrapes of the fixture in the last minute (rates need two).
        deadline = time.time() + 90
        while True:
            assert time.time() < deadline, "Prometheus did not scrape the fixture in time; see " + cls.log.name
            assert cls.prom.poll() is None, "prometheus exited; see " + cls.log.name
            try:
                r = get(cls.api + "/api/v1/query?" + urllib.parse.urlencode(
                    {"query": 'count_over_time(up{job="h3pipe"}[1m])'}))
                res = r["data"]["result"]
                if res and float(res[0]["value"][1]) >= 8:
                    break
            except (urllib.error.URLError, ConnectionError, KeyError):
                pass
            time.sleep(0.25)
        # And the rules evaluated at least once.
        deadline = time.time() + 30
        while True:
            groups = get(cls.api + "/api/v1/rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
                break
            assert time.time() < deadline, "rules were never evaluated"
            time.sleep(0.25)

    @classmethod
    def tearDownClass(cls):
        for p in (getattr(cls, "prom", None), getattr(cls, "fixture", None)):
            if p and p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
        if getattr(cls, "log", None):
            cls.log.close()
        shutil.rmtree(getattr(cls, "tmp", ""), ignore_errors=True)

    def query(self, expr):
        try:
            return get(self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        except urllib.error.HTTPError as e:
            return json.loads(e.read())

    def test_labels_from_services_and_targets(self):
        r = self.query('h3pipe_stage_tasks_total{stage="sample",outcome="ok"}')
        self.assertEqual(r["status"], "success")
        self.assertEqual(r["data"]["result"][0]["metric"]["host"], "node292")
        self.assertEqual(r["data"]["result"][0]["metric"]["pool"], "t10x4-sample")
        gpu = self.query('h3pipe_gpu_utilization_ratio{host="node292"}')["data"]["result"]
        self.assertEqual(len(gpu), 4, "4 fake GPUs with the target's host label")
        self.assertEqual(self.query("h3pipe_gpu_available")["data"]["result"][0]["value"][1], "1")
        xfer = self.query('h3pipe_transfer_bytes_total{host="node292"}')["data"]["result"]
        self.assertEqual({x["metric"]["role"] for x in xfer}, {"sender", "receiver"})

    def test_alert_expressions(self):
        with open(os.path.join(SRC, "configs/prometheus/alerts.yml")) as f:
            rules = [r for g in yaml.safe_load(f)["groups"] for r in g["rules"]]
        self.assertGreaterEqual(len(rules), 6)
        for rule in rules:
            with self.subTest(alert=rule["alert"]):
                r = self.query(rule["expr"])
                self.assertEqual(r["status"], "success", r.get("error"))
        evaluated = {r["name"]: r for g in get(self.api + "/api/v1/rules")["data"]["groups"] for r in g["rules"]}
        for rule in rules:
            with self.subTest(alert=rule["alert"], evaluated_by="prometheus"):
                self.assertIn(rule["alert"], evaluated)
                self.assertEqual(evaluated[rule["alert"]]["health"], "ok", evaluated[rule["alert"]].get("lastError"))

    def test_dashboard_queries_return_data(self):
        with open(os.path.join(SRC, "configs/grafana/dashboards/h3pipe.json")) as f:
            dash = json.load(f)
        n = 0
        for panel in dash["panels"]:
            for t in panel.get("targets", []):
                expr = t["expr"]
                for k, v in VARS.items():
                    expr = expr.replace(k, v)
                n += 1
                with self.subTest(panel=panel["title"], ref=t["refId"]):
                    r = self.query(expr)
                    self.assertEqual(r["status"], "success", f"{expr}: {r.get('error')}")
                    self.assertTrue(r["data"]["result"], f"no data: {expr}")
        self.assertGreaterEqual(n, 20)
        var = dash["templating"]["list"][0]
        self.assertEqual(var["name"], "host")
        match = var["query"]["query"][len("label_values("):-len(", host)")]
        values = get(self.api + "/api/v1/label/host/values?" + urllib.parse.urlencode({"match[]": match}))
        self.assertIn("node292", values["data"])


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
