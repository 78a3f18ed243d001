#!/usr/bin/python3
"""helm/h3pipe renders to valid Kubernetes YAML for its default values and for the other
configurations it documents.

Helm is not packaged in Debian: the chart is rendered with tests/deploy/helm_render.py, a
test-only implementation of the Go-template subset the chart uses (it refuses anything else).
Checks, per scenario: every template renders; every document is YAML without duplicate keys,
with apiVersion/kind/metadata.name and DNS-1123 names; every value a template reads is defined
in values.yaml, and every value in values.yaml is read; workload selectors match their pod
labels; probes and Services name container ports that exist; volume mounts name volumes that
exist; service arguments are the flags the binaries take; GPU limits match the pools; the
rendered cluster.json passes h3pipe's own config loader (config_check); KEDA and
ServiceMonitor objects point at objects the chart renders; the chart's copy of the Redis files
equals configs/redis.  Redis credentials: every h3pipe workload runs as its own ACL user
(H3PIPE_REDIS_USER) and mounts only that user's key of the Redis Secret; no workload gets
redis-admin (or the operator's password); the bundled Redis mounts them all and renders the ACL
file; the Secret holds one password per user of configs/redis/users.acl; with redis.tls every
h3pipe pod has the stunnel client sidecar, Redis the server sidecar, and the Service only the TLS
port.

Usage: helm_chart_test.py SOURCE_DIR CONFIG_CHECK_BINARY
"""
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import helm_render  # noqa: E402

SRC = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIG_CHECK = sys.argv[2] if len(sys.argv) > 2 else ""
CHART = os.path.join(SRC, "helm", "h3pipe")

# The flags every service binary takes (common/runner/runner.cpp).
SERVICE_FLAGS = {"--config", "--host", "--pool", "--bind", "--metrics-port", "--health-port",
                 "--redis", "--state-dir", "--log-level"}
STAGE_COMPONENTS = {"encoder", "sampler", "decoder"}
ACL_USERS = ["encoder", "sampler", "decoder", "transfer", "operator", "keda", "admin"]
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class UniqueKeyLoader(yaml.SafeLoader):
    pass


def _mapping(loader, node, deep=False):
    keys = set()
    for k, _ in node.value:
        key = loader.construct_object(k, deep=deep)
        if key in keys:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k.start_mark)
        keys.add(key)
    return loader.construct_mapping(node, deep)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)

SCENARIOS = {
    "defaults": {},
    "everything-on": {
        "image": {"registry": "registry.example.com"},
        "storage": {"existingClaim": "h3pipe-shared"},
        "redis": {"passwords": {"sampler": "pw"},
                  "external": {"enabled": True, "url": "redis://redis.prod.internal:6380"}},
        "curve": {"keys": {"node292": {"public": "P" * 40, "secret": "S" * 40},
                           "node241": {"public": "Q" * 40, "secret": "T" * 40}}},
        "samplerPools": [
            {"name": "t10x4-a", "host": "node292", "gpus": 4, "gpuModel": "T10", "sharesGpusWith": "",
             "profiles": {"sd": {"kind": "fixed", "seconds": 127.39}}, "runtime": {"name": "sim", "settings": {}},
             "replicas": 1, "nodeSelector": {"gpu": "t10"}, "affinity": {"nodeAffinity": {}},
             "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
             "resources": {"limits": {"memory": "32Gi"}, "requests": {"cpu": "4"}}},
            {"name": "t10x4-b", "host": "node241", "gpus": 2, "gpuModel": "T10", "sharesGpusWith": "",
             "profiles": {"sd": {"kind": "fixed", "seconds": 140}}, "runtime": {}, "replicas": 2,
             "nodeSelector": {}, "affinity": {}, "tolerations": [], "resources": {}},
        ],
        "encoder": {"gpus": 2, "sharesGpusWith": "t10x4-a"},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "keda": {"enabled": True},
    },
    "existing-secrets-no-encoder": {
        "redis": {"existingSecret": "my-redis", "bundled": {"persistence": {"enabled": False}}},
        "curve": {"existingSecret": "my-curve"},
        "encoder": {"enabled": False},
        "transfer": {"enabled": False},
    },
    "redis-tls": {
        "redis": {"tls": {"enabled": True, "existingSecret": "h3pipe-redis-tls"}},
        "keda": {"enabled": True},
    },
}


def render(overrides):
    helm_render.READS.clear()
    values = helm_render.load_values(CHART, overrides)
    r = helm_render.Renderer(CHART, values)
    texts = r.render_all()
    docs = []
    for fn, text in texts.items():
        if fn.endswith(".txt"):
            continue
        for d in yaml.load_all(text, Loader=UniqueKeyLoader):
            if d is not None:
                docs.append((fn, d))
    return r, values, texts, docs


def pod_spec(doc):
    return doc["spec"]["template"]["spec"]


class ChartTest(unittest.TestCase):
    def check_scenario(self, name):
        r, values, texts, docs = render(SCENARIOS[name])
        self.assertEqual(sorted(r.missing), [], f"{name}: templates read values that values.yaml lacks")
        if name == "defaults":
            self.assertEqual(helm_render.unread_values(values), [], "values.yaml keys no template reads")
        self.assertIn("NOTES.txt", texts)
        kinds = {}
        for fn, d in docs:
            with self.subTest(scenario=name, file=fn, kind=d.get("kind"), name=d.get("metadata", {}).get("name")):
                self.assertIn("apiVersion", d)
                self.assertIn("kind", d)
                meta = d["metadata"]
                self.assertTrue(DNS1123.match(meta["name"]) and len(meta["name"]) <= 63, meta["name"])
                for k, v in meta.get("labels", {}).items():
                    self.assertTrue(LABEL_VALUE.match(str(v)) and len(str(v)) <= 63, f"label {k}={v}")
                kinds.setdefault(d["kind"], []).append(d)
        workloads = kinds.get("Deployment", []) + kinds.get("DaemonSet", []) + kinds.get("StatefulSet", [])
        self.assertTrue(workloads)
        for w in workloads:
            with self.subTest(scenario=name, workload=w["metadata"]["name"]):
                self.check_workload(w, values)
                self.check_redis_credentials(w, values)
        for s in kinds.get("Service", []):
            with self.subTest(scenario=name, service=s["metadata"]["name"]):
                matches = [w for w in workloads
                           if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v
                                  for k, v in s["spec"]["selector"].items())]
                self.assertTrue(matches, "Service selects no workload")
                port_names = {p["name"] for w in matches for c in pod_spec(w)["containers"] for p in c.get("ports", [])}
                for p in s["spec"]["ports"]:
                    self.assertIn(p["targetPort"], port_names)
        cms = {c["metadata"]["name"]: c for c in kinds.get("ConfigMap", [])}
        cluster = json.loads(cms["h3-h3pipe-config"]["data"]["cluster.json"])
        self.check_cluster_json(cluster, values)
        for so in kinds.get("ScaledObject", []):
            with self.subTest(scenario=name, scaledobject=so["metadata"]["name"]):
                target = so["spec"]["scaleTargetRef"]["name"]
                self.assertIn(target, [d["metadata"]["name"] for d in kinds["Deployment"]])
                trig = so["spec"]["triggers"][0]
                self.assertEqual(trig["type"], "redis-streams")
                md = trig["metadata"]
                self.assertRegex(md["address"], r"^[a-z0-9.-]+:\d+$")
                self.assertTrue(md["stream"].startswith("h3pipe:stream:"))
                self.assertEqual(md["consumerGroup"], md["stream"].split(":")[-1].split("@")[0])
                self.assertTrue(str(md["pendingEntriesCount"]).isdigit())
                self.assertIn(trig["authenticationRef"]["name"],
                              [t["metadata"]["name"] for t in kinds["TriggerAuthentication"]])
        if name == "everything-on":
            self.assertEqual(len(kinds["ScaledObject"]), 3)
            self.assertEqual(kinds["ScaledObject"][0]["spec"]["triggers"][0]["metadata"]["address"],
                             "redis.prod.internal:6380")
            self.assertEqual(cluster["redis"]["host"], "redis.prod.internal")
            self.assertEqual(cluster["redis"]["port"], 6380)
            self.assertNotIn("StatefulSet", kinds, "external Redis: no bundled StatefulSet")
            sm = kinds["ServiceMonitor"][0]
            sel = sm["spec"]["selector"]["matchLabels"]
            self.assertTrue(any(all(s["metadata"]["labels"].get(k) == v for k, v in sel.items())
                                for s in kinds["Service"]))
            self.assertTrue(sm["spec"]["endpoints"][0]["honorLabels"])
            secrets = {s["metadata"]["name"] for s in kinds["Secret"]}
            self.assertIn("h3-h3pipe-curve", secrets)
            images = {c["image"] for w in workloads for c in pod_spec(w)["containers"]}
            self.assertIn("registry.example.com/h3pipe/sampler:0.1.0", images)
        if name == "defaults":
            self.assertEqual(len(kinds["StatefulSet"]), 1)
            self.assertNotIn("ScaledObject", kinds)
            self.assertNotIn("ServiceMonitor", kinds)
            redis_secret = [s for s in kinds["Secret"] if s["metadata"]["name"] == "h3-h3pipe-redis"][0]
            self.assertEqual(sorted(redis_secret["data"]), sorted(f"redis-{u}.password" for u in ACL_USERS))
            pws = [base64.b64decode(v).decode() for v in redis_secret["data"].values()]
            self.assertTrue(all(len(p) >= 32 for p in pws), "random passwords are generated")
            self.assertEqual(len(set(pws)), len(pws), "one password per user")
            svc = [s for s in kinds["Service"] if s["metadata"]["name"] == "h3-h3pipe-redis"][0]
            self.assertEqual([p["port"] for p in svc["spec"]["ports"]], [6379])
        if name == "redis-tls":
            sts = kinds["StatefulSet"][0]
            names = [c["name"] for c in pod_spec(sts)["containers"]]
            self.assertEqual(names, ["redis", "stunnel"])
            svc = [s for s in kinds["Service"] if s["metadata"]["name"] == "h3-h3pipe-redis"][0]
            self.assertEqual([p["port"] for p in svc["spec"]["ports"]], [6380], "TLS only")
            self.assertEqual((cluster["redis"]["host"], cluster["redis"]["port"]), ("127.0.0.1", 6379))
            conf = cms["h3-h3pipe-stunnel"]["data"]
            for f in ("stunnel-client.conf", "stunnel-server.conf"):
                with open(os.path.join(SRC, "configs", "redis", f)) as x:
                    self.assertEqual(conf[f].strip(), x.read().strip())
            for w in workloads:
                comp = w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
                if comp == "redis":
                    continue
                with self.subTest(tunnel=w["metadata"]["name"]):
                    tunnel = [c for c in pod_spec(w)["containers"] if c["name"] == "redis-tunnel"]
                    self.assertEqual(len(tunnel), 1, "the stunnel client sidecar")
                    self.assertIn("connect = h3-h3pipe-redis:6380/", tunnel[0]["args"][0])
                    vols = {v["name"]: v for v in pod_spec(w)["volumes"]}
                    self.assertEqual(vols["redis-tls"]["secret"]["secretName"], "h3pipe-redis-tls")
            for so in kinds["ScaledObject"]:
                md = so["spec"]["triggers"][0]["metadata"]
                self.assertEqual((md["address"], md["enableTLS"]), ("h3-h3pipe-redis:6380", "true"))
            params = {p["parameter"] for p in kinds["TriggerAuthentication"][0]["spec"]["secretTargetRef"]}
            self.assertEqual(params, {"password", "ca", "cert", "key"})
        if name == "existing-secrets-no-encoder":
            self.assertNotIn("Secret", kinds)
            self.assertNotIn("DaemonSet", kinds)
            vols = [v for w in workloads for v in pod_spec(w).get("volumes", [])]
            self.assertIn("my-redis", [v["secret"]["secretName"] for v in vols if "secret" in v])

    def check_redis_credentials(self, w, values):
        """Each h3pipe service: its own ACL user and only that user's password; Redis: all."""
        ps = pod_spec(w)
        comp = w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        secret = values["redis"]["existingSecret"] or "h3-h3pipe-redis"
        redis_vols = [v for v in ps.get("volumes", []) if v.get("secret", {}).get("secretName") == secret]
        for c in ps.get("initContainers", []) + ps["containers"]:
            for e in c.get("env", []):
                self.assertNotIn("admin", str(e.get("value", "")), f"{c['name']}: {e}")
        if comp == "redis":
            self.assertEqual(len(redis_vols), 1)
            self.assertNotIn("items", redis_vols[0]["secret"], "Redis renders the ACL file from every user's password")
            c = ps["containers"][0]
            env = {e["name"]: e.get("value") for e in c["env"]}
            mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
            self.assertEqual(mounts[redis_vols[0]["name"]], env["REDIS_SECRETS_DIR"])
            self.assertIn("--user h3pipe-operator", " ".join(c["readinessProbe"]["exec"]["command"]))
            return
        self.assertIn(comp, STAGE_COMPONENTS | {"transfer"})
        self.assertEqual(len(redis_vols), 1, "one Redis secret volume")
        self.assertEqual(redis_vols[0]["secret"]["items"], [{"key": f"redis-{comp}.password", "path": "redis-password"}],
                         "only its own user's password")
        c = ps["containers"][0]
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        self.assertEqual(env["H3PIPE_REDIS_USER"], f"h3pipe-{comp}")
        mount = [m for m in c["volumeMounts"] if m["name"] == redis_vols[0]["name"]][0]
        self.assertEqual(env["H3PIPE_REDIS_PASSWORD_FILE"], mount["mountPath"] + "/redis-password")
        with open(os.path.join(SRC, "configs", "redis", "users.acl")) as f:
            self.assertIn(f"user h3pipe-{comp} on ", f.read())

    def check_workload(self, w, values):
        spec = w["spec"]
        sel = spec["selector"]["matchLabels"]
        labels = spec["template"]["metadata"]["labels"]
        for k, v in sel.items():
            self.assertEqual(labels.get(k), v, "selector does not match the pod labels")
        ps = pod_spec(w)
        volumes = {v["name"] for v in ps.get("volumes", [])}
        volumes |= {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
        for c in ps.get("initContainers", []) + ps["containers"]:
            self.assertTrue(c["image"])
            ports = {p["name"] for p in c.get("ports", [])}
            for p in ports:
                self.assertLessEqual(len(p), 15)
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                pr = c.get(probe)
                if pr and "httpGet" in pr:
                    self.assertIn(pr["httpGet"]["port"], ports)
                    self.assertIn(pr["httpGet"]["path"], ("/healthz", "/readyz"))
                if pr and "tcpSocket" in pr:
                    self.assertIn(pr["tcpSocket"]["port"], ports)
            for m in c.get("volumeMounts", []):
                self.assertIn(m["name"], volumes)
        comp = labels.get("app.kubernetes.io/component")
        if comp in STAGE_COMPONENTS | {"transfer"}:
            c = ps["containers"][0]
            self.assertTrue(c["image"].endswith(f"/{comp}:{values['image']['tag']}"), c["image"])
            self.assertTrue(ps["securityContext"]["runAsNonRoot"])
            flags = {}
            for a in c["args"]:
                self.assertTrue(a.startswith("--") and "=" in a, a)
                k, v = a.split("=", 1)
                self.assertIn(k, SERVICE_FLAGS)
                flags[k] = v
            self.assertEqual(flags["--config"], "/etc/h3pipe/config/cluster.json")
            self.assertIn("/etc/h3pipe/config", [m["mountPath"] for m in c["volumeMounts"]])
            self.assertEqual(flags["--bind"], "0.0.0.0")
            self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(int(flags["--metrics-port"]), ports["metrics"])
            self.assertEqual(int(flags["--health-port"]), ports["health"])
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            self.assertEqual(env["H3PIPE_HEALTH_PORT"], flags["--health-port"])
            if comp in STAGE_COMPONENTS:
                self.assertIn("--pool", flags)
                pool = labels["h3pipe.io/pool"]
                self.assertEqual(flags["--pool"], pool)
                pv = values[comp] if comp != "sampler" else [p for p in values["samplerPools"] if p["name"] == pool][0]
                gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)
                self.assertEqual(gpus, pv["gpus"])
                self.assertEqual(flags["--host"], pv["host"])
            else:
                self.assertNotIn("--pool", flags)
                self.assertEqual(flags["--host"], "$(NODE_NAME)")
                self.assertIn("NODE_NAME", env)

    def check_cluster_json(self, cluster, values):
        pools = {p["name"]: p for p in cluster["pools"]}
        for sp in values["samplerPools"]:
            self.assertEqual(pools[sp["name"]]["gpus"], list(range(sp["gpus"])))
            self.assertEqual(pools[sp["name"]]["stage"], "sample")
        hosts = {h["name"] for h in cluster["hosts"]}
        for p in cluster["pools"]:
            self.assertIn(p["host"], hosts)
        self.assertEqual(cluster["redis"]["password_file"], "/etc/h3pipe/secrets/redis-password")
        if CONFIG_CHECK:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(cluster, f)
            try:
                r = subprocess.run([CONFIG_CHECK, f.name], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
            finally:
                os.unlink(f.name)

    def test_defaults(self):
        self.check_scenario("defaults")

    def test_everything_on(self):
        self.check_scenario("everything-on")

    def test_existing_secrets(self):
        self.check_scenario("existing-secrets-no-encoder")

    def test_redis_tls(self):
        self.check_scenario("redis-tls")

    def test_redis_files_match_configs(self):
        for a, b in (("redis.conf", "redis.conf"), ("redis-entrypoint.sh", "entrypoint.sh"), ("acl.conf", "acl.conf"),
                     ("users.acl", "users.acl"), ("render_acl.sh", "render_acl.sh"),
                     ("stunnel-client.conf", "stunnel-client.conf"), ("stunnel-server.conf", "stunnel-server.conf")):
            with open(os.path.join(CHART, "files", a)) as x, open(os.path.join(SRC, "configs", "redis", b)) as y:
                self.assertEqual(x.read(), y.read(), f"helm/h3pipe/files/{a} differs from configs/redis/{b}")

    def test_renderer_refuses_unknown_functions(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "templates"))
            with open(os.path.join(d, "Chart.yaml"), "w") as f:
                f.write("name: t\nversion: 0.0.1\n")
            with open(os.path.join(d, "templates", "x.yaml"), "w") as f:
                f.write("a: {{ .Values.a | someSprigFunction }}\n")
            r = helm_render.Renderer(d, {"a": 1})
            with self.assertRaises(helm_render.TemplateError):
                r.render_all()


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
