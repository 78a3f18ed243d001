#!/usr/bin/python3
"""helm/h3pipe rendered by Helm's own template engine and checked the way a cluster would.

The chart is rendered by tests/deploy/helmrender (Go's text/template with Helm's semantics and
sprig, on Debian's golang-go and Go packages; Helm is not packaged), built here into
BUILD/helmrender (Go's build cache keeps that quick).  For every values variant docs/deploy.md
names (SCENARIOS) the rendered objects must be consistent as the API server and the kubelet
would need them: names (DNS-1123 labels, Services DNS-1035, StatefulSet names short enough for
the controller-revision-hash label), label values, selectors matching pod labels, Service
targetPorts and probe ports naming container ports, every volume mount naming a volume, every
Secret / ConfigMap (and key) a pod or KEDA references rendered by the chart, named by the
user's values or made by a pre-install hook Job (so an install starts every pod), the StatefulSet's headless governing Service,
KEDA's Redis address fully qualified, no replicas on Deployments a ScaledObject owns, TLS keys
split by side, the transfer port one value.  The rendered cluster.json passes h3pipe's config
loader (h3pipe_config_check).  Values that the services would reject fail at render with a
clear message (FAILURES).  values.yaml and the templates agree both ways (helmrender -missing,
-unread).  With --schemas, every object is validated against the Kubernetes schemas of npm's
kubernetes-models and the CRD schemas in tests/deploy/crds (tests/deploy/k8s_validate.js);
exit 77 (skip) when kubernetes-models is not installed.

Usage: deploy_helm.py [--schemas] SOURCE_DIR CONFIG_CHECK_BINARY BUILD_DIR
"""
import base64
import concurrent.futures
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SCHEMAS = "--schemas" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--schemas"]
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(ARGS[0]) if ARGS else os.path.abspath(os.path.join(HERE, "..", ".."))
CONFIG_CHECK = ARGS[1] if len(ARGS) > 1 else ""
BUILD = os.path.abspath(ARGS[2]) if len(ARGS) > 2 else os.path.join(SRC, "build")
CHART = os.path.join(SRC, "helm", "h3pipe")
sys.path.insert(0, HERE)
from helm_scenarios import (EXTERNAL, FAILURES, KEYS, LONG_RELEASE, NS, POOLS, SCENARIOS,  # noqa: E402
                            configure, effective_values, hook_secrets, render, renderer, run_renderer)
from helm_scale_checks import ScaleInChecks, SentinelScriptsTest  # noqa: E402,F401  (run by unittest)
configure(SRC, BUILD)

SERVICE_FLAGS = {"--config", "--host", "--pool", "--bind", "--metrics-port", "--health-port",
                 "--redis", "--state-dir", "--log-level"}
STAGE_COMPONENTS = {"encoder", "sampler", "decoder"}
ACL_USERS = ["encoder", "sampler", "decoder", "transfer", "operator", "keda", "admin"]
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
TLS_CLIENT = {"h3pipe_ca.pem", "redis_client_cert.pem", "redis_client_key.pem"}
TLS_SERVER = {"h3pipe_ca.pem", "redis_tls_cert.pem", "redis_tls_key.pem"}
def pod_spec(w):
    return w["spec"]["template"]["spec"]


def component(w):
    return w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


class Rendered:
    """One scenario's objects, by kind and name."""

    def __init__(self, name):
        self.name = name
        self.release, self.user = SCENARIOS[name]
        self.values = effective_values(self.user)
        self.docs = render(name)
        self.by = {}
        for d in self.docs:
            self.by.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
        self.workloads = [d for k in ("Deployment", "DaemonSet", "StatefulSet") for d in self.by.get(k, {}).values()]
        self.pods = self.workloads + self.kind("Job")
        self.hook_secrets = hook_secrets(self.kind("Job"))

    def kind(self, k):
        return list(self.by.get(k, {}).values())

    def get(self, kind, name):
        return self.by.get(kind, {}).get(name)


class ChartTest(ScaleInChecks, unittest.TestCase):
    maxDiff = None

    # ---- per-scenario checks ------------------------------------------------------------------

    def check_names(self, r):
        for d in r.docs:
            name = d["metadata"]["name"]
            self.assertTrue(DNS1123.match(name) and len(name) <= 63, f"{d['kind']} name {name!r}")
            if d["kind"] == "Service":
                self.assertTrue(DNS1035.match(name), f"Service name {name!r} is not DNS-1035")
            if d["kind"] == "StatefulSet":
                # Its pods carry controller-revision-hash=<name>-<10 chars>, a label value.
                self.assertLessEqual(len(name), 52, f"StatefulSet {name} leaves no room for the revision hash")
            for k, v in d["metadata"].get("labels", {}).items():
                self.assertTrue(LABEL_VALUE.match(str(v)) and len(str(v)) <= 63, f"{name}: label {k}={v}")
            tmpl = d.get("spec", {}).get("template", {}).get("metadata", {}).get("labels", {})
            for k, v in tmpl.items():
                self.assertTrue(LABEL_VALUE.match(str(v)) and len(str(v)) <= 63, f"{name} pods: label {k}={v}")

    def check_pods(self, r):
        """What the kubelet needs to start every pod: volumes, mounts, Secrets, ConfigMaps, keys."""
        for w in r.pods:
            wname = w["metadata"]["name"]
            spec, ps = w["spec"], pod_spec(w)
            if w["kind"] != "Job":  # a Job's selector is generated
                self.assertTrue(selects(spec["selector"]["matchLabels"], spec["template"]["metadata"]["labels"]),
                                f"{wname}: selector does not match the pod labels")
            volumes = {v["name"]: v for v in ps.get("volumes", [])}
            volumes.update({t["metadata"]["name"]: t for t in spec.get("volumeClaimTemplates", [])})
            self.assertEqual(len(volumes), len(ps.get("volumes", [])) + len(spec.get("volumeClaimTemplates", [])),
                             f"{wname}: duplicate volume names")
            for v in ps.get("volumes", []):
                self.check_source(r, wname, v)
            for c in ps.get("initContainers", []) + ps["containers"]:
                where = f"{wname}/{c['name']}"
                self.assertTrue(c["image"], where)
                ports = c.get("ports", [])
                names = [p["name"] for p in ports if "name" in p]
                self.assertEqual(len(names), len(set(names)), f"{where}: duplicate port names")
                for n in names:
                    self.assertTrue(len(n) <= 15 and DNS1123.match(n), f"{where}: port name {n}")
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    pr = c.get(probe) or {}
                    for how in ("httpGet", "tcpSocket"):
                        if how in pr:
                            port = pr[how]["port"]
                            self.assertIn(port, names + [p["containerPort"] for p in ports], f"{where}: {probe} port")
                mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
                self.assertEqual(len(mounts), len(set(mounts)), f"{where}: two mounts at one path")
                for m in c.get("volumeMounts", []):
                    self.assertIn(m["name"], volumes, f"{where}: mounts volume {m['name']} that the pod lacks")
                for e in c.get("env", []):
                    ref = e.get("valueFrom", {})
                    if "secretKeyRef" in ref:
                        self.check_key(r, "Secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"], where)
                    if "configMapKeyRef" in ref:
                        self.check_key(r, "ConfigMap", ref["configMapKeyRef"]["name"], ref["configMapKeyRef"]["key"], where)

    def check_source(self, r, wname, v):
        for kind, field, name_key in (("Secret", "secret", "secretName"), ("ConfigMap", "configMap", "name")):
            if field not in v or v[field].get("optional"):
                continue
            name = v[field][name_key]
            obj = r.get(kind, name)
            self.assertTrue(obj is not None or (kind == "Secret" and (name in EXTERNAL or name in r.hook_secrets)),
                            f"{wname}: volume {v['name']} needs {kind} {name}, which is neither rendered nor "
                            "created by a pre-install hook")
            for item in v[field].get("items", []):
                self.check_key(r, kind, name, item["key"], f"{wname} volume {v['name']}")

    def check_key(self, r, kind, name, key, where):
        obj = r.get(kind, name)
        if obj is None and kind == "Secret" and name in r.hook_secrets:
            self.assertIn(key, r.hook_secrets[name], f"{where}: the hook's Secret {name} has no key {key}")
            return
        if obj is None:
            self.assertIn(name, EXTERNAL, f"{where}: {kind} {name} is not rendered")
            return
        keys = set(obj.get("data", {})) | set(obj.get("stringData", {}))
        self.assertIn(key, keys, f"{where}: {kind} {name} has no key {key}")

    def check_services(self, r):
        for s in r.kind("Service"):
            name = s["metadata"]["name"]
            matches = [w for w in r.workloads if selects(s["spec"]["selector"], w["spec"]["template"]["metadata"]["labels"])]
            self.assertTrue(matches, f"Service {name} selects no pods")
            for p in s["spec"]["ports"]:
                for w in matches:
                    cports = [cp for c in pod_spec(w)["containers"] for cp in c.get("ports", [])]
                    self.assertIn(p["targetPort"], [cp.get("name") for cp in cports] + [cp["containerPort"] for cp in cports],
                                  f"Service {name} port {p['name']}: no such container port in {w['metadata']['name']}")
        for sts in r.kind("StatefulSet"):
            gov = r.get("Service", sts["spec"]["serviceName"])
            self.assertIsNotNone(gov, "StatefulSet serviceName names no rendered Service")
            self.assertEqual(gov["spec"].get("clusterIP"), "None", "the governing Service must be headless")
            self.assertTrue(selects(gov["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"]))

    def check_keda(self, r):
        v = r.values
        auths = r.by.get("TriggerAuthentication", {})
        for a in auths.values():
            for ref in a["spec"]["secretTargetRef"]:
                self.check_key(r, "Secret", ref["name"], ref["key"], f"TriggerAuthentication {a['metadata']['name']}")
        for so in r.kind("ScaledObject"):
            target = r.get("Deployment", so["spec"]["scaleTargetRef"]["name"])
            self.assertIsNotNone(target, "ScaledObject targets no rendered Deployment")
            trig = so["spec"]["triggers"][0]
            md = trig["metadata"]
            self.assertEqual(trig["type"], "redis-sentinel-streams" if v["redis"]["sentinel"]["enabled"] else "redis-streams")
            self.assertTrue(md["stream"].startswith("h3pipe:stream:"))
            # KEDA's XLEN mode (the backlog: an acked task leaves its stream) is the one it picks
            # when no consumerGroup is named; with one it counts the pending entries, the running
            # tasks, at most one per replica: never a reason to add one (keda_backlog_test).
            self.assertNotIn("consumerGroup", md)
            self.assertNotIn("pendingEntriesCount", md)
            self.assertRegex(str(md["streamLength"]), r"^[1-9]\d*$")
            self.assertIn(trig["authenticationRef"]["name"], auths)
            if v["redis"]["sentinel"]["enabled"]:  # check_sentinel: the Sentinels, not one address
                self.assertNotIn("replicas", target["spec"])
                continue
            self.assertRegex(md["address"], r"^[a-z0-9.-]+:\d+$")
            if not v["redis"]["external"]["enabled"]:
                # KEDA's operator resolves names in its own namespace: <svc>.<namespace>.svc.
                self.assertRegex(md["address"], rf"^[a-z0-9-]+\.{NS}\.svc:\d+$")
            host, port = md["address"].rsplit(":", 1)
            if v["redis"]["external"]["enabled"]:
                self.assertEqual(host, "redis.prod.internal")
                self.assertEqual(port, "6380" if v["redis"]["external"]["url"].endswith(":6380") else "6379")
            else:
                svc, ns, tail = host.split(".")
                self.assertEqual((ns, tail), (NS, "svc"), md["address"])
                self.assertIn(int(port), [p["port"] for p in r.get("Service", svc)["spec"]["ports"]])
            self.assertEqual(md.get("enableTLS") == "true", bool(v["redis"]["tls"]["enabled"]))
            self.assertNotIn("replicas", target["spec"], f"{target['metadata']['name']}: replicas set while a ScaledObject owns them")
        if v["keda"]["enabled"]:
            scaled = {so["spec"]["scaleTargetRef"]["name"] for so in r.kind("ScaledObject")}
            grouped = self.gpu_grouped_pools(r)
            for d in r.kind("Deployment"):
                if component(d) not in ("sampler", "decoder"):
                    continue
                pool = d["spec"]["template"]["metadata"]["labels"]["h3pipe.io/pool"]
                if pool in grouped:
                    # Its stages take turns on the group's GPU lease: replicas would only wait.
                    self.assertNotIn(d["metadata"]["name"], scaled, f"{pool} is in a GPU group")
                    self.assertIn("replicas", d["spec"])
                else:
                    self.assertIn(d["metadata"]["name"], scaled)
        else:
            for d in r.kind("Deployment"):
                self.assertIn("replicas", d["spec"])

    def gpu_grouped_pools(self, r):
        """Pools of cluster.json in a GPU group: they name another's GPUs or another names theirs."""
        cluster = json.loads(r.get("ConfigMap", f"{self.fullname(r)}-config")["data"]["cluster.json"])
        named = {p.get("shares_gpus_with") for p in cluster["pools"]} - {None, ""}
        return {p["name"] for p in cluster["pools"] if p.get("shares_gpus_with") or p["name"] in named}

    def check_tls(self, r):
        """Each pod mounts only its side of the TLS Secret, and what its stunnel.conf names."""
        if not r.values["redis"]["tls"]["enabled"]:
            for w in r.workloads:
                self.assertNotIn("redis-tunnel", [c["name"] for c in pod_spec(w)["containers"]])
            return
        confs = r.get("ConfigMap", f"{self.fullname(r)}-stunnel")["data"]
        address = None
        for w in r.workloads:
            ps = pod_spec(w)
            vols = {v["name"]: v for v in ps["volumes"]}
            is_redis = component(w) == "redis"
            for c in ps["containers"]:
                if c["name"] not in ("redis-tunnel", "stunnel"):
                    continue
                conf_name = "stunnel-server.conf" if is_redis else "stunnel-client.conf"
                mounted = {}
                for m in c["volumeMounts"]:
                    sec = vols[m["name"]].get("secret")
                    if sec and sec["secretName"] == r.values["redis"]["tls"]["existingSecret"]:
                        self.assertIn("items", sec, f"{w['metadata']['name']}: the whole TLS Secret is mounted")
                        keys = {i["key"] for i in sec["items"]}
                        self.assertEqual(keys, TLS_SERVER if is_redis else TLS_CLIENT, w["metadata"]["name"])
                        mounted.update({f"{m['mountPath']}/{i['path']}": i["key"] for i in sec["items"]})
                cp = configparser.ConfigParser(comment_prefixes=(";", "#"), interpolation=None, strict=False)
                cp.read_string("[global]\n" + confs[conf_name])
                section = cp[cp.sections()[-1]]
                for k in ("CAfile", "cert", "key"):
                    self.assertIn(section[k], mounted, f"{w['metadata']['name']}/{c['name']}: {conf_name} {k}")
                if not is_redis:
                    args = c["args"][0]
                    self.assertIn(f"connect = {self.redis_tls_address(r)}/", args)
                    check_host = re.findall(r"checkHost = ([^/]+)/", args)[-1]
                    self.assertEqual(check_host, self.redis_tls_address(r).rsplit(":", 1)[0])
                    address = check_host
        for so in r.kind("ScaledObject"):
            # KEDA checks the certificate against the host it dials: the one stunnel checks.
            self.assertEqual(so["spec"]["triggers"][0]["metadata"]["address"].rsplit(":", 1)[0], address)

    def fullname(self, r):
        return r.get("ConfigMap", next(n for n in r.by["ConfigMap"] if n.endswith("-config")))["metadata"]["name"][:-len("-config")]

    def redis_tls_address(self, r):
        return f"{self.fullname(r)}-redis.{NS}.svc:6380"

    def check_workloads(self, r):
        v = r.values
        secret = v["redis"]["existingSecret"] or f"{self.fullname(r)}-redis"
        for w in r.workloads:
            ps, comp = pod_spec(w), component(w)
            labels = w["spec"]["template"]["metadata"]["labels"]
            redis_vols = [x for x in ps.get("volumes", []) if x.get("secret", {}).get("secretName") == secret]
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
                continue
            if comp == "sentinel":  # check_sentinel
                continue
            if comp == "api":  # check_api
                continue
            self.assertIn(comp, STAGE_COMPONENTS | {"transfer"})
            self.assertEqual(len(redis_vols), 1, "one Redis secret volume")
            # Its own user's password only, and with redis.sentinel h3pipe-sentinel's (check_sentinel).
            self.assertEqual(redis_vols[0]["secret"]["items"][0], {"key": f"redis-{comp}.password", "path": "redis-password"},
                             "only its own user's password")
            self.assertEqual(len(redis_vols[0]["secret"]["items"]), 2 if v["redis"]["sentinel"]["enabled"] else 1)
            c = ps["containers"][0]
            env = {e["name"]: e.get("value") for e in c.get("env", [])}
            self.assertEqual(env["H3PIPE_REDIS_USER"], f"h3pipe-{comp}")
            mount = [m for m in c["volumeMounts"] if m["name"] == redis_vols[0]["name"]][0]
            self.assertEqual(env["H3PIPE_REDIS_PASSWORD_FILE"], mount["mountPath"] + "/redis-password")
            with open(os.path.join(SRC, "configs", "redis", "users.acl")) as f:
                self.assertIn(f"user h3pipe-{comp} on ", f.read())
            self.assertTrue(c["image"].endswith(f"/{comp}:{v['image']['tag']}"), c["image"])
            self.assertTrue(ps["securityContext"]["runAsNonRoot"])
            flags = {}
            for a in c["args"]:
                self.assertTrue(a.startswith("--") and "=" in a, a)
                k, val = a.split("=", 1)
                self.assertIn(k, SERVICE_FLAGS)
                flags[k] = val
            self.assertEqual(flags["--config"], "/etc/h3pipe/config/cluster.json")
            self.assertIn("/etc/h3pipe/config", [m["mountPath"] for m in c["volumeMounts"]])
            self.assertEqual(flags["--bind"], "0.0.0.0")
            self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(int(flags["--metrics-port"]), ports["metrics"])
            self.assertEqual(int(flags["--health-port"]), ports["health"])
            self.assertEqual(env["H3PIPE_HEALTH_PORT"], flags["--health-port"])
            if comp in STAGE_COMPONENTS:
                pool = labels["h3pipe.io/pool"]
                self.assertEqual(flags["--pool"], pool)
                pv = v[comp] if comp != "sampler" else [p for p in v["samplerPools"] if p["name"] == pool][0]
                self.assertEqual(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0), pv["gpus"])
                self.assertEqual(flags["--host"], pv["host"])
            else:
                self.assertNotIn("--pool", flags)
                self.assertEqual(flags["--host"], "$(NODE_NAME)")
                self.assertIn("NODE_NAME", env)
                self.assertEqual(ports["transfer"], v["transfer"]["port"])
                self.assertEqual([p["hostPort"] for p in c["ports"] if p["name"] == "transfer"], [v["transfer"]["port"]])
                # The data connection (AES-256-GCM data frames) is reachable the same way.
                self.assertEqual(ports["transfer-data"], v["transfer"]["dataPort"])
                self.assertEqual([p["hostPort"] for p in c["ports"] if p["name"] == "transfer-data"],
                                 [v["transfer"]["dataPort"]])
                inits = {i["name"]: i for i in ps.get("initContainers", [])}
                self.assertEqual("keys" in inits, bool(v["cluster"]["transfer"]["curve"]))
                if "keys" in inits:
                    # Only the node's own secret key reaches the transfer container.
                    copy = inits["keys"]["command"][-1]
                    self.assertEqual(re.findall(r"/secret-keys/\S*", copy),
                                     ["/secret-keys/*.pub", '/secret-keys/$NODE_NAME.key"'])
                    self.assertIn("NODE_NAME", [e["name"] for e in inits["keys"]["env"]])

    def check_cluster_json(self, r):
        v = r.values
        cluster = json.loads(r.get("ConfigMap", f"{self.fullname(r)}-config")["data"]["cluster.json"])
        pools = {p["name"]: p for p in cluster["pools"]}
        for sp in v["samplerPools"]:
            self.assertEqual(pools[sp["name"]]["gpus"], list(range(sp["gpus"])))
            self.assertEqual(pools[sp["name"]]["stage"], "sample")
        hosts = {h["name"]: h for h in cluster["hosts"]}
        for p in cluster["pools"]:
            self.assertIn(p["host"], hosts)
        for h in hosts.values():
            self.assertEqual(h["transfer_port"], v["transfer"]["port"], "one transfer port: the DaemonSet's hostPort")
            self.assertEqual(h["transfer_data_port"], v["transfer"]["dataPort"], "the data port: a hostPort too")
        self.assertEqual(cluster["redis"]["password_file"], "/etc/h3pipe/secrets/redis-password")
        if v["redis"]["sentinel"]["enabled"]:
            self.assertNotIn("host", cluster["redis"], "behind Sentinel: the Sentinels, not one address")
        elif v["redis"]["tls"]["enabled"]:
            self.assertEqual((cluster["redis"]["host"], cluster["redis"]["port"]), ("127.0.0.1", 6379))
        elif v["redis"]["external"]["enabled"]:
            port = 6380 if v["redis"]["external"]["url"].endswith(":6380") else 6379
            self.assertEqual((cluster["redis"]["host"], cluster["redis"]["port"]), ("redis.prod.internal", port))
        else:
            self.assertEqual((cluster["redis"]["host"], cluster["redis"]["port"]), (f"{self.fullname(r)}-redis.{NS}.svc", 6379))
        if CONFIG_CHECK:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(cluster, f)
            try:
                res = subprocess.run([CONFIG_CHECK, f.name], capture_output=True, text=True)
                self.assertEqual(res.returncode, 0, f"{r.name}: the config loader rejects cluster.json: {res.stderr}")
            finally:
                os.unlink(f.name)

    def check_monitor(self, r):
        for sm in r.kind("ServiceMonitor"):
            sel = sm["spec"]["selector"]["matchLabels"]
            svcs = [s for s in r.kind("Service") if selects(sel, s["metadata"]["labels"])]
            self.assertTrue(svcs, "ServiceMonitor selects no Service")
            for ep in sm["spec"]["endpoints"]:
                for s in svcs:
                    self.assertIn(ep["port"], [p["name"] for p in s["spec"]["ports"]], s["metadata"]["name"])
            self.assertTrue(sm["spec"]["endpoints"][0]["honorLabels"])

    def check_api(self, r):
        """h3pipe-api (docs/api.md): a Deployment and its Service with probes on /healthz and /readyz,
        the operator's Redis user only, loopback behind its own TLS, the Ingress to the Service."""
        v, full = r.values["api"], self.fullname(r)
        d, svc = r.get("Deployment", f"{full}-api"), r.get("Service", f"{full}-api")
        if not v["enabled"]:
            self.assertIsNone(d)
            self.assertIsNone(svc)
            self.assertNotIn(f"{full}-api", r.by.get("Ingress", {}))
            return
        self.assertIsNotNone(d, "no h3pipe-api Deployment")
        self.assertIsNotNone(svc, "no h3pipe-api Service")
        self.assertEqual(d["spec"]["replicas"], v["replicas"])
        ps = pod_spec(d)
        api = [c for c in ps["containers"] if c["name"] == "api"][0]
        self.assertTrue(api["image"].endswith(f"/api:{r.values['image']['tag']}"), api["image"])
        flags = dict(a.split("=", 1) for a in api["args"])
        self.assertEqual(flags["--config"], "/etc/h3pipe/config/cluster.json")
        self.assertEqual(int(flags["--port"]), v["port"])
        self.assertEqual(int(flags["--metrics-port"]), v["metricsPort"])
        env = {e["name"]: e.get("value") for e in api["env"]}
        self.assertEqual(env["H3PIPE_REDIS_USER"], "h3pipe-operator")
        secret = r.values["redis"]["existingSecret"] or f"{full}-redis"
        redis_vols = [x for x in ps["volumes"] if x.get("secret", {}).get("secretName") == secret]
        self.assertEqual(redis_vols[0]["secret"]["items"][0], {"key": "redis-operator.password", "path": "redis-password"})
        tls = v["tls"]["existingSecret"]
        serving = [c for c in ps["containers"] if c["name"] == ("tls" if tls else "api")][0]
        probes = {p: serving[p]["httpGet"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
        self.assertEqual(probes["livenessProbe"]["path"], "/healthz")
        self.assertEqual(probes["readinessProbe"]["path"], "/readyz")
        port_name = "https" if tls else "http"
        for p in probes.values():
            self.assertEqual(p["port"], port_name)
            self.assertEqual(p.get("scheme", "HTTP"), "HTTPS" if tls else "HTTP")
        self.assertEqual({p["name"]: p["targetPort"] for p in svc["spec"]["ports"]}, {port_name: port_name, "metrics": "metrics"})
        self.assertEqual(svc["metadata"]["labels"]["h3pipe.io/metrics"], "true")
        if tls:
            # Loopback only; HTTPS by the sidecar with the Secret's pair, the API port unpublished.
            self.assertEqual(flags["--bind"], "127.0.0.1")
            self.assertNotIn("http", [p["name"] for p in api.get("ports", [])], "the plain port is not published")
            conf = r.get("ConfigMap", f"{full}-api-tls")["data"]["stunnel-api.conf"]
            self.assertIn(f"connect = 127.0.0.1:{v['port']}", conf)
            self.assertIn(f"accept = 0.0.0.0:{v['tlsPort']}", conf)
            vols = {x["name"]: x for x in ps["volumes"]}
            mounted = {}
            for m in serving["volumeMounts"]:
                sec = vols[m["name"]].get("secret")
                if sec:
                    self.assertEqual(sec["secretName"], tls)
                    mounted.update({f"{m['mountPath']}/{i['path']}": i["key"] for i in sec["items"]})
            for k in ("cert", "key"):
                path = re.search(rf"^{k} = (\S+)$", conf, re.M).group(1)
                self.assertIn(path, mounted, f"stunnel-api.conf {k}")
        else:
            self.assertEqual(flags["--bind"], "0.0.0.0")
        if v["nodeSelector"]:
            self.assertEqual(ps["nodeSelector"], v["nodeSelector"])
        elif not r.values["storage"]["existingClaim"]:
            self.assertEqual(ps["nodeSelector"], {"kubernetes.io/hostname": r.values["decoder"]["host"]},
                             "the MP4s are on the decoder's node")
        ing = r.by.get("Ingress", {}).get(f"{full}-api")
        self.assertEqual(ing is not None, bool(v["ingress"]["enabled"]))
        if ing:
            rule = ing["spec"]["rules"][0]
            self.assertEqual(rule["host"], v["ingress"]["host"])
            backend = rule["http"]["paths"][0]["backend"]["service"]
            self.assertEqual(backend["name"], svc["metadata"]["name"])
            self.assertIn(backend["port"]["name"], [p["name"] for p in svc["spec"]["ports"]])
            if v["ingress"]["tlsSecret"]:
                self.assertEqual(ing["spec"]["tls"], [{"hosts": [v["ingress"]["host"]], "secretName": v["ingress"]["tlsSecret"]}])

    def test_api(self):
        r = Rendered("defaults")
        self.assertIn("h3-h3pipe-api", r.by["Deployment"])
        self.assertEqual(r.get("Service", "h3-h3pipe-api")["spec"]["type"], "ClusterIP")
        r = Rendered("api-ingress-tls")
        d = r.get("Deployment", "h3-h3pipe-api")
        self.assertEqual(sorted(c["name"] for c in pod_spec(d)["containers"]), ["api", "redis-tunnel", "tls"])
        self.assertEqual(r.get("Ingress", "h3-h3pipe-api")["spec"]["ingressClassName"], "nginx")
        self.assertNotIn("h3-h3pipe-api", Rendered("api-off").by.get("Deployment", {}))

    def test_scenarios(self):
        for name in SCENARIOS:
            with self.subTest(scenario=name):
                r = Rendered(name)
            for check in (self.check_names, self.check_pods, self.check_services, self.check_keda,
                          self.check_tls, self.check_workloads, self.check_cluster_json, self.check_monitor,
                          self.check_api,
                          self.check_grace, self.check_keda_scale_in, self.check_sentinel):
                with self.subTest(scenario=name, check=check.__name__):
                    check(r)

    # ---- what particular scenarios must render --------------------------------------------------

    def test_defaults(self):
        r = Rendered("defaults")
        self.assertEqual(len(r.kind("StatefulSet")), 1)
        self.assertNotIn("ScaledObject", r.by)
        self.assertNotIn("ServiceMonitor", r.by)
        # A plain install: the CURVE Secret the DaemonSet mounts comes from the pre-install hook.
        self.assertNotIn("h3-h3pipe-curve", r.by["Secret"])
        self.assertEqual(r.hook_secrets, {"h3-h3pipe-curve": {f"{h}.{x}" for h in ("node292", "node241") for x in ("pub", "key")}})
        ds = r.get("DaemonSet", "h3-h3pipe-transfer")
        self.assertIn("h3-h3pipe-curve", [v.get("secret", {}).get("secretName") for v in pod_spec(ds)["volumes"]])
        redis_secret = r.get("Secret", "h3-h3pipe-redis")
        self.assertEqual(sorted(redis_secret["data"]), sorted(f"redis-{u}.password" for u in ACL_USERS))
        pws = [base64.b64decode(x).decode() for x in redis_secret["data"].values()]
        self.assertTrue(all(len(p) >= 32 for p in pws), "random passwords are generated")
        self.assertEqual(len(set(pws)), len(pws), "one password per user")
        self.assertEqual([p["port"] for p in r.get("Service", "h3-h3pipe-redis")["spec"]["ports"]], [6379])
        self.assertEqual(r.get("StatefulSet", "h3-h3pipe-redis")["spec"]["serviceName"], "h3-h3pipe-redis-headless")

    def test_external_redis(self):
        r = Rendered("external-redis")
        self.assertNotIn("StatefulSet", r.by, "external Redis: no bundled StatefulSet")
        self.assertEqual(len(r.kind("ScaledObject")), 1, "the decoder (the sampler shares the encoder's GPUs)")
        self.assertEqual(base64.b64decode(r.get("Secret", "h3-h3pipe-redis")["data"]["redis-sampler.password"]), b"pw")

    def test_keda_scales_the_pools_replicas_can_speed_up(self):
        def scaled(name):
            return sorted(so["spec"]["scaleTargetRef"]["name"] for so in Rendered(name).kind("ScaledObject"))
        # values.yaml: the encoder shares the T10s of t10x4-sample (the seeds' node292).
        self.assertEqual(scaled("keda"), ["h3-h3pipe-decoder-3080ti-decode"])
        # t10x4-a is the encoder's group; the other two pools and the decoder are free to grow.
        self.assertEqual(scaled("sampler-pools"), ["h3-h3pipe-decoder-3080ti-decode", "h3-h3pipe-sampler-cpu-c",
                                                   "h3-h3pipe-sampler-t10x2-b"])

    def test_sampler_pools(self):
        r = Rendered("sampler-pools")
        self.assertEqual(sorted(d["metadata"]["name"] for d in r.kind("Deployment") if component(d) == "sampler"),
                         sorted(f"h3-h3pipe-sampler-{p['name']}" for p in POOLS))
        images = {c["image"] for w in r.workloads for c in pod_spec(w)["containers"]}
        self.assertIn("registry.example.com/h3pipe/sampler:0.1.0", images)
        cpu = r.get("Deployment", "h3-h3pipe-sampler-cpu-c")
        self.assertNotIn("limits", pod_spec(cpu)["containers"][0]["resources"], "no GPU limit for gpus: 0")

    def test_tls(self):
        r = Rendered("redis-tls")
        sts = r.get("StatefulSet", "h3-h3pipe-redis")
        self.assertEqual([c["name"] for c in pod_spec(sts)["containers"]], ["redis", "stunnel"])
        self.assertEqual([p["port"] for p in r.get("Service", "h3-h3pipe-redis")["spec"]["ports"]], [6380], "TLS only")
        conf = r.get("ConfigMap", "h3-h3pipe-stunnel")["data"]
        for f in ("stunnel-client.conf", "stunnel-server.conf"):
            with open(os.path.join(SRC, "configs", "redis", f)) as x:
                self.assertEqual(conf[f].strip(), x.read().strip())
        params = {p["parameter"] for p in r.kind("TriggerAuthentication")[0]["spec"]["secretTargetRef"]}
        self.assertEqual(params, {"password", "ca", "cert", "key"})

    def test_existing_secrets(self):
        r = Rendered("existing-secrets")
        self.assertNotIn("Secret", r.by)
        ds = r.get("DaemonSet", "h3-h3pipe-transfer")
        self.assertIn("my-curve", [v.get("secret", {}).get("secretName") for v in pod_spec(ds)["volumes"]])

    def test_long_release(self):
        r = Rendered("long-release")
        full = self.fullname(r)
        self.assertLessEqual(len(full), 46)
        self.assertTrue(full.startswith(LONG_RELEASE[:37].rstrip("-")))
        so_targets = {so["spec"]["scaleTargetRef"]["name"] for so in r.kind("ScaledObject")}
        self.assertTrue(all(len(n) <= 63 for n in so_targets))

    def test_numeric_strings(self):
        r = Rendered("numeric-strings")
        self.assertEqual(pod_spec(r.get("Deployment", "h3-h3pipe-sampler-t10x4-sample"))["containers"][0]["image"],
                         "h3pipe/sampler:2")
        self.assertEqual(base64.b64decode(r.get("Secret", "h3-h3pipe-redis")["data"]["redis-sampler.password"]), b"12345")

    def test_release_contains_chart_name(self):
        r = Rendered("release-contains-chart-name")
        self.assertIn("prod-h3pipe-redis", r.by["StatefulSet"])

    def test_failures(self):
        for name, (release, values, message) in FAILURES.items():
            with self.subTest(failure=name):
                res = run_renderer(release, values)
                self.assertNotEqual(res.returncode, 0, f"{name}: rendered")
                self.assertIn(message, res.stderr)
                self.assertEqual(res.stdout, "", "nothing half-written")

    # ---- values.yaml and the templates ---------------------------------------------------------

    def test_every_value_named_exists(self):
        res = run_renderer("h3", KEYS, "-missing")
        self.assertEqual(res.returncode, 0, res.stderr)
        self.assertEqual(json.loads(res.stdout) or [], [], "templates name values that values.yaml lacks")

    def test_every_value_is_read(self):
        names = ["defaults", "external-redis", "redis-tls", "servicemonitor", "sampler-pools", "sentinel",
                 "sentinel-external", "api-ingress-tls"]

        def unread(n):
            res = run_renderer(SCENARIOS[n][0], SCENARIOS[n][1], "-unread")
            self.assertEqual(res.returncode, 0, res.stderr)
            return set(json.loads(res.stdout) or [])
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
            sets = list(ex.map(unread, names))
        self.assertEqual(sorted(set.intersection(*sets)), [], "values.yaml keys no template output depends on")

    def test_redis_files_match_configs(self):
        for a, b in (("redis.conf", "redis.conf"), ("redis-entrypoint.sh", "entrypoint.sh"), ("acl.conf", "acl.conf"),
                     ("users.acl", "users.acl"), ("render_acl.sh", "render_acl.sh"),
                     ("stunnel-client.conf", "stunnel-client.conf"), ("stunnel-server.conf", "stunnel-server.conf")):
            with open(os.path.join(CHART, "files", a)) as x, open(os.path.join(SRC, "configs", "redis", b)) as y:
                self.assertEqual(x.read(), y.read(), f"helm/h3pipe/files/{a} differs from configs/redis/{b}")


class EngineTest(unittest.TestCase):
    """helmrender behaves as Helm's engine where the Python renderer did not."""

    def render_tiny(self, template, values):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "templates"))
            with open(os.path.join(d, "Chart.yaml"), "w") as f:
                f.write("apiVersion: v2\nname: t\nversion: 0.0.1\n")
            with open(os.path.join(d, "values.yaml"), "w") as f:
                json.dump(values, f)
            with open(os.path.join(d, "templates", "_h.tpl"), "w") as f:
                f.write('{{- define "t.x" -}}x-{{ . }}{{- end -}}')
            with open(os.path.join(d, "templates", "cm.yaml"), "w") as f:
                f.write(template)
            return subprocess.run([renderer(), "-chart", d, "-name", "r"], capture_output=True, text=True)

    def test_semantics(self):
        cases = [
            ('a: "{{ .Values.nope }}|{{ .Values.a.b }}"', {"a": {}}, 'a: "|"'),  # missingkey=zero, no "<no value>"
            ('a: "{{ printf "%d" .Values.n }}"', {"n": 3}, 'a: "%!d(float64=3)"'),  # values are float64, as in Helm
            ('a: {{ include "t.x" 1 }}\nb: {{- .Values.m | toYaml | nindent 2 }}', {"m": {"k": 1}}, "a: x-1\nb:\n  k: 1"),
            ('a: {{ (lookup "v1" "Secret" "ns" "n") | len }}', {}, "a: 0"),
            ('a: {{ .Values.u | urlParse | toJson }}', {"u": "redis://h"}, '"host":"h"'),
            ("a: {{ .Values.p }}", {"p": 12345678}, "a: 1.2345678e+07"),  # Helm's float rendering of big ints
        ]
        for tpl, values, want in cases:
            with self.subTest(tpl=tpl):
                r = self.render_tiny(tpl, values)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(want, r.stdout)

    def test_errors(self):
        for tpl, values, want in [
            ('a: {{ required "x is required" .Values.x }}', {}, "Error: execution error at (t/templates/cm.yaml:1:6): x is required"),
            ("a: {{ .Values.a | someFunction }}", {"a": 1}, 'function "someFunction" not defined'),
            ("a: {{ if gt .Values.f 1 }}y{{ end }}", {"f": 1.5}, "incompatible types for comparison"),  # float vs int
            ("a: {{ if gt .Values.f 1.0 }}y{{ end }}", {"f": 1.5}, ""),
            ("a: {{ .Values.a.b.c }}", {"a": {}}, "nil pointer evaluating interface {}.c"),  # a nil parent
            ('a: {{ if gt .Values.n 1 }}y{{ end }}', {"n": "2"}, "incompatible types for comparison"),
            ("a: 1\na: 2", {}, 'key "a" already set'),
        ]:
            with self.subTest(tpl=tpl):
                r = self.render_tiny(tpl, values)
                if want:
                    self.assertNotEqual(r.returncode, 0, r.stdout)
                    self.assertIn(want, r.stderr)
                else:
                    self.assertEqual(r.returncode, 0, r.stderr)


def schemas_main():
    """Every scenario's objects against kubernetes-models and tests/deploy/crds."""
    node = shutil.which("node")
    if not node or not os.path.isdir(os.path.join(HERE, "node_modules", "kubernetes-models")):
        print("SKIP: kubernetes-models is not installed in tests/deploy/node_modules "
              "(scripts/setup.sh runs npm ci there; npm could not reach its registry?)")
        return 77
    with tempfile.TemporaryDirectory() as d:
        files = []
        for name, (release, values) in SCENARIOS.items():
            res = run_renderer(release, values, "-o", "json")
            if res.returncode:
                print(f"FAIL {name}: {res.stderr}")
                return 1
            files.append(os.path.join(d, f"{name}.json"))
            with open(files[-1], "w") as f:
                f.write(res.stdout)
        res = subprocess.run([node, os.path.join(HERE, "k8s_validate.js"), *files], capture_output=True, text=True)
        print(res.stdout + res.stderr)
        if res.returncode == 3:
            return 77
        if res.returncode:
            return res.returncode
        # The validator itself: one wrong field per schema must be reported.
        bad = [
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}, "spec": {
                "selector": {}, "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "p"}]}]}}}},
            {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
             "spec": {"scaleTargetRef": {"name": "x"}, "minReplicaCount": "1", "triggers": []}},
            {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication", "metadata": {"name": "x"},
             "spec": {"secretTargetRef": [{"parameter": "password", "name": "s"}]}},
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "x"},
             "spec": {"selector": {}, "endpoints": [{"port": "m", "interval": "15 s"}]}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "x"},
             "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": "get"}]},
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
             "spec": {"backoffLimit": "2", "template": {"spec": {"containers": [{"name": "c"}]}}}},
        ]
        for i, obj in enumerate(bad):
            path = os.path.join(d, f"bad{i}.json")
            with open(path, "w") as f:
                json.dump({"documents": [{"source": "bad", "object": obj}]}, f)
            r = subprocess.run([node, os.path.join(HERE, "k8s_validate.js"), path], capture_output=True, text=True)
            if r.returncode != 1:
                print(f"FAIL: the validator accepts a wrong {obj['kind']}: {r.stdout}{r.stderr}")
                return 1
        print("the validator rejects a wrong Deployment, ScaledObject, TriggerAuthentication, ServiceMonitor, Role, Job")
        return 0


if __name__ == "__main__":
    if SCHEMAS:
        sys.exit(schemas_main())
    unittest.main(argv=sys.argv[:1], verbosity=2)
