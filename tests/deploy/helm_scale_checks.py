#!/usr/bin/python3
"""Checks of helm/h3pipe's scale-in and Redis failover objects (issue #23 items 3 and 4), mixed
into deploy_helm.ChartTest and run for every scenario; and SentinelScriptsTest, which runs the
chart's own rendered files/redis-node.sh and files/sentinel.sh with real redis-server processes
(a primary, a replica, three Sentinels on 127.0.0.1, free ports), kills the primary and watches
the Sentinels promote the replica and the old primary come back as a replica.

Grace per pool: ceil(t + max(minMarginSeconds, marginFraction * t)), t the pool's longest profile
(fixed seconds, normal mean + 3 sd, cycle the largest) times cluster.time_scale, or the pool's own
terminationGracePeriodSeconds; the seeds' sampler (263.3 s) gets 316 s."""
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

from helm_scenarios import KEYS, NS, chart_dir, render, run_renderer  # noqa: F401

STAGES = ("encoder", "sampler", "decoder")


def expected_grace(values, pool):
    own = float(pool.get("terminationGracePeriodSeconds") or 0)
    if own > 0:
        return int(own)
    t = 0.0
    for p in (pool.get("profiles") or {}).values():
        kind = p.get("kind", "fixed")
        if kind == "normal":
            s = p.get("mean", 0) + 3 * p.get("sd", 0)
        elif kind == "cycle":
            s = max(p["seconds"])
        else:
            s = p.get("seconds", 0)
        t = max(t, float(s))
    t *= values["cluster"]["time_scale"]
    g = values["stopGrace"]
    return int(math.ceil(t + max(g["minMarginSeconds"], g["marginFraction"] * t)))


def pool_values(values, comp, pool_name):
    if comp == "sampler":
        return [p for p in values["samplerPools"] if p["name"] == pool_name][0]
    return values[comp]


class ScaleInChecks:
    """Per-scenario checks; `r` is deploy_helm.Rendered."""

    def grace_of(self, r, deployment):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        comp = labels["app.kubernetes.io/component"]
        return expected_grace(r.values, pool_values(r.values, comp, labels["h3pipe.io/pool"]))

    def check_grace(self, r):
        for d in r.kind("Deployment"):
            ps = d["spec"]["template"]["spec"]
            comp = d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
            if comp == "api":  # h3pipe-api holds no task: no stage grace (deploy_helm's check_api)
                continue
            self.assertIn(comp, STAGES)
            want = self.grace_of(r, d)
            self.assertEqual(ps["terminationGracePeriodSeconds"], want, d["metadata"]["name"])
            c = ps["containers"][0]
            env = {e["name"]: e.get("value") for e in c["env"]}
            self.assertEqual(env.get("H3PIPE_STOP_GRACE_S"), str(want), "the worker hands back within the pod's grace")
            # The service's own drain: SIGTERM to PID 1 (the service; docker/Dockerfile's ENTRYPOINT).
            self.assertEqual(c["lifecycle"]["preStop"]["exec"]["command"], ["/bin/sh", "-c", "kill -TERM 1"])
        if r.name == "defaults":
            by = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                  for d in r.kind("Deployment") if not d["metadata"]["name"].endswith("-api")}
            # The seeds' profiles: hd 263.3 s -> 263.3 + 52.66; decoder 36.31 + 30; encoder 13.06 + 30.
            self.assertEqual(by, {"h3-h3pipe-sampler-t10x4-sample": 316, "h3-h3pipe-decoder-3080ti-decode": 67,
                                  "h3-h3pipe-encoder-t10x4-encode": 44})
        if r.name == "scale-in":
            by = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                  for d in r.kind("Deployment") if not d["metadata"]["name"].endswith("-api")}
            # time_scale 0.5: normal (200 + 3 * 40) / 2 = 160 -> 192; cycle 4000 / 2 -> 2400; own 777.
            self.assertEqual((by["h3-h3pipe-sampler-normal"], by["h3-h3pipe-sampler-cycle"],
                              by["h3-h3pipe-sampler-own-grace"], by["h3-h3pipe-decoder-3080ti-decode"]),
                             (192, 2400, 777, 45))

    def check_keda_scale_in(self, r):
        for so in r.kind("ScaledObject"):
            target = r.get("Deployment", so["spec"]["scaleTargetRef"]["name"])
            grace = self.grace_of(r, target)
            down = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
            # Not shrunk while its tasks run: the window covers the longest stage, one pod at a time.
            self.assertGreaterEqual(down["stabilizationWindowSeconds"], min(grace, 3600))
            self.assertGreaterEqual(down["stabilizationWindowSeconds"], r.values["keda"]["scaleDown"]["minStabilizationSeconds"])
            self.assertLessEqual(down["stabilizationWindowSeconds"], 3600, "the HPA's limit")
            self.assertEqual(down["policies"], [{"type": "Pods", "value": 1, "periodSeconds": min(grace, 1800)}])
            self.assertGreaterEqual(so["spec"]["cooldownPeriod"], grace)

    def sentinel_addresses(self, r):
        v = r.values["redis"]["sentinel"]
        if r.values["redis"]["external"]["enabled"]:
            return v["external"]["addresses"]
        sts = [s for s in r.kind("StatefulSet")
               if s["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "sentinel"]
        self.assertEqual(len(sts), 1)
        name = sts[0]["metadata"]["name"]
        self.assertEqual(sts[0]["spec"]["replicas"], v["sentinels"])
        gov = r.get("Service", sts[0]["spec"]["serviceName"])
        self.assertEqual(gov["spec"]["clusterIP"], "None")
        return [f"{name}-{i}.{gov['metadata']['name']}.{NS}.svc:26379" for i in range(v["sentinels"])]

    def check_sentinel(self, r):
        v = r.values
        cluster = json.loads(r.get("ConfigMap", f"{self.fullname(r)}-config")["data"]["cluster.json"])
        redis_sts = r.get("StatefulSet", f"{self.fullname(r)}-redis")
        if not v["redis"]["sentinel"]["enabled"] or v["redis"]["external"]["enabled"]:
            self.assertEqual(r.kind("PodDisruptionBudget"), [], "a budget only for the bundled Sentinel set")
        if not v["redis"]["sentinel"]["enabled"]:
            self.assertNotIn("sentinel", cluster["redis"])
            self.assertFalse([s for s in r.kind("StatefulSet") if "sentinel" in s["metadata"]["name"]])
            if redis_sts:
                self.assertEqual(redis_sts["spec"]["replicas"], 1)
            return
        sv = v["redis"]["sentinel"]
        addresses = self.sentinel_addresses(r)
        self.assertEqual(cluster["redis"]["sentinel"], {
            "addresses": addresses, "master": sv["master"], "user": "h3pipe-sentinel",
            "password_file": "/etc/h3pipe/secrets/sentinel-password"})
        self.assertEqual((cluster["redis"]["wait_replicas"], cluster["redis"]["wait_timeout_ms"]),
                         (sv["waitReplicas"], sv["waitTimeoutMs"]))
        secret = v["redis"]["existingSecret"] or f"{self.fullname(r)}-redis"
        if r.get("Secret", secret):
            self.assertIn("redis-sentinel.password", r.get("Secret", secret)["data"])
        # Every h3pipe pod can read the Sentinel password where cluster.json says.
        for w in r.workloads:
            comp = w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
            if comp not in STAGES + ("transfer",):
                continue
            ps = w["spec"]["template"]["spec"]
            vol = [x for x in ps["volumes"] if x.get("secret", {}).get("secretName") == secret][0]
            self.assertIn({"key": "redis-sentinel.password", "path": "sentinel-password"}, vol["secret"]["items"])
            mount = [m for m in ps["containers"][0]["volumeMounts"] if m["name"] == vol["name"]][0]
            self.assertEqual(mount["mountPath"] + "/sentinel-password", cluster["redis"]["sentinel"]["password_file"])
        for so in r.kind("ScaledObject"):
            trig = so["spec"]["triggers"][0]
            self.assertEqual(trig["type"], "redis-sentinel-streams")
            self.assertEqual(trig["metadata"]["addresses"].split(","), addresses)
            self.assertEqual(trig["metadata"]["sentinelMaster"], sv["master"])
            self.assertEqual(trig["metadata"]["sentinelUsername"], "h3pipe-sentinel")
            self.assertNotIn("address", trig["metadata"])
        for a in r.kind("TriggerAuthentication"):
            refs = {x["parameter"]: x["key"] for x in a["spec"]["secretTargetRef"]}
            self.assertEqual(refs.get("sentinelPassword"), "redis-sentinel.password")
        if v["redis"]["external"]["enabled"]:
            self.assertIsNone(redis_sts)
            return
        # Bundled: a primary + replicas StatefulSet (no Service spreading clients over them), the
        # scripts the pods run are the chart's files, and every pod names the same Sentinels.
        self.assertEqual(redis_sts["spec"]["replicas"], sv["replicas"])
        self.assertIsNone(r.get("Service", f"{self.fullname(r)}-redis"))
        files = r.get("ConfigMap", f"{self.fullname(r)}-redis")["data"]
        for f in ("redis-node.sh", "sentinel.sh"):
            with open(os.path.join(chart_dir(), "files", f)) as x:
                self.assertEqual(files[f].strip(), x.read().strip())
        headless = redis_sts["spec"]["serviceName"]
        nodes = [f"{self.fullname(r)}-redis-{i}.{headless}.{NS}.svc:6379" for i in range(sv["replicas"])]
        env = {e["name"]: e.get("value") for e in redis_sts["spec"]["template"]["spec"]["containers"][0]["env"]}
        self.assertEqual(redis_sts["spec"]["template"]["spec"]["containers"][0]["command"][-1],
                         "/usr/local/etc/redis/redis-node.sh")
        self.assertEqual(env["SENTINEL_ADDRESSES"].split(), addresses)
        self.assertEqual(env["REDIS_BOOTSTRAP_PRIMARY"], nodes[0])
        self.assertEqual(env["REDIS_ANNOUNCE_HOST"], f"$(POD_NAME).{headless}.{NS}.svc")
        sts = [s for s in r.kind("StatefulSet") if s["metadata"]["name"] != redis_sts["metadata"]["name"]][0]
        c = sts["spec"]["template"]["spec"]["containers"][0]
        senv = {e["name"]: e.get("value") for e in c["env"]}
        self.assertEqual(senv["REDIS_NODES"].split(), nodes)
        self.assertEqual(senv["SENTINEL_ADDRESSES"].split(), addresses)
        self.assertEqual((senv["SENTINEL_MASTER"], senv["SENTINEL_QUORUM"], senv["SENTINEL_DOWN_AFTER_MS"]),
                         (sv["master"], str(sv["quorum"]), str(sv["downAfterMilliseconds"])))
        self.assertEqual(senv["SENTINEL_ANNOUNCE_HOST"], f"$(POD_NAME).{sts['spec']['serviceName']}.{NS}.svc")
        vols = {x["name"]: x for x in sts["spec"]["template"]["spec"]["volumes"]}
        pw = [x for x in vols.values() if x.get("secret")][0]["secret"]
        self.assertEqual({i["key"] for i in pw["items"]}, {"redis-admin.password", "redis-sentinel.password"},
                         "a Sentinel holds the admin's and its own users' passwords only")
        # Disruption budgets (#36 item 3): a drain evicts one Redis pod at a time and keeps a majority
        # of the Sentinels (at least the quorum), each budget selecting exactly its StatefulSet's pods.
        pdbs = {p["metadata"]["name"]: p for p in r.kind("PodDisruptionBudget")}
        self.assertEqual(len(pdbs), 2, list(pdbs))
        for target, want in ((redis_sts, {"maxUnavailable": 1}),
                             (sts, {"minAvailable": max(sv["sentinels"] // 2 + 1, sv["quorum"])})):
            pdb = pdbs.get(target["metadata"]["name"])
            self.assertIsNotNone(pdb, f"no PodDisruptionBudget named {target['metadata']['name']}: {list(pdbs)}")
            self.assertEqual(pdb["apiVersion"], "policy/v1")
            self.assertEqual(pdb["spec"]["selector"], target["spec"]["selector"])
            labels = target["spec"]["template"]["metadata"]["labels"]
            self.assertTrue(all(labels.get(k) == x for k, x in pdb["spec"]["selector"]["matchLabels"].items()))
            self.assertEqual({k: x for k, x in pdb["spec"].items() if k != "selector"}, want)


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def wait_for(what, cond, timeout_s):
    deadline = time.time() + timeout_s
    last = None
    while time.time() < deadline:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # a server coming up or going down
            last = e
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last})")


@unittest.skipUnless(shutil.which("redis-server") and shutil.which("redis-cli"), "redis-server not installed")
class SentinelScriptsTest(unittest.TestCase):
    """The chart's rendered redis-node.sh / sentinel.sh with real Redis and Sentinel processes."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="h3sentinel-")
        self.procs = []
        release = "h3"
        res = run_renderer(release, dict(KEYS, redis={"sentinel": {"enabled": True}}), "-o", "json")
        self.assertEqual(res.returncode, 0, res.stderr)
        docs = [d["object"] for d in json.loads(res.stdout)["documents"]]
        cm = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "h3-h3pipe-redis"][0]
        self.conf = os.path.join(self.work, "conf")
        os.makedirs(self.conf)
        for name, text in cm["data"].items():
            with open(os.path.join(self.conf, name), "w") as f:
                f.write(text)
        self.secrets = os.path.join(self.work, "secrets")
        os.makedirs(self.secrets, mode=0o700)
        # Passwords with what a config file must quote (#36 item 3): a double quote, a backslash, a
        # space, a single quote, $ and a backquote; replication (masterauth) and Sentinel's
        # auth-pass / sentinel-pass break on an unquoted one.
        for u in ("encoder", "sampler", "decoder", "transfer", "operator", "keda", "admin", "sentinel"):
            with open(os.path.join(self.secrets, f"redis-{u}.password"), "w") as f:
                f.write(f"pw-{u}-{os.getpid()} \"q\\ 'a' $HOME `x`\n")
        self.redis_ports = [free_port(), free_port()]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels = " ".join(f"localhost:{p}" for p in self.sentinel_ports)

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(self.work, ignore_errors=True)

    def spawn(self, argv, env, log):
        with open(os.path.join(self.work, log), "ab") as out:
            p = subprocess.Popen(argv, env=dict(os.environ, **env), stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        self.procs.append(p)
        return p

    def start_node(self, port):
        d = os.path.join(self.work, f"redis-{port}")
        os.makedirs(d, exist_ok=True)
        return self.spawn(["sh", os.path.join(self.conf, "redis-node.sh"), "--port", str(port), "--bind", "127.0.0.1",
                           "--dir", d], {
            "REDIS_CONF": os.path.join(self.conf, "redis.conf"), "REDIS_SECRETS_DIR": self.secrets,
            "REDIS_ACL_DIR": os.path.join(d, "acl"), "REDIS_SERVER": "redis-server",
            "REDIS_ANNOUNCE_HOST": "localhost", "REDIS_ANNOUNCE_PORT": str(port),
            "REDIS_BOOTSTRAP_PRIMARY": f"localhost:{self.redis_ports[0]}", "SENTINEL_ADDRESSES": self.sentinels,
            "SENTINEL_MASTER": "h3"}, f"redis-{port}.log")

    def cli(self, port, user, *args):
        with open(os.path.join(self.secrets, f"redis-{user.split('-', 1)[1]}.password")) as f:
            pw = f.read().strip()
        r = subprocess.run(["redis-cli", "--no-auth-warning", "--raw", "-p", str(port), "--user", user, *args],
                           env=dict(os.environ, REDISCLI_AUTH=pw), capture_output=True, text=True, timeout=10)
        return r.stdout.strip()

    def primary(self, sentinel_port):
        return self.cli(sentinel_port, "h3pipe-sentinel", "SENTINEL", "get-master-addr-by-name", "h3").split()

    def start_sentinel(self, port, monitors):
        """A real Sentinel through the chart's sentinel.sh that monitors `monitors` (a node nothing
        listens on: it names it, as it would a primary it has not yet seen fail)."""
        d = os.path.join(self.work, f"sentinel-{port}")
        p = self.spawn(["sh", os.path.join(self.conf, "sentinel.sh")], {
            "SENTINEL_ANNOUNCE_HOST": "127.0.0.1", "SENTINEL_PORT": str(port), "SENTINEL_ADDRESSES": "",
            "REDIS_NODES": monitors, "REDIS_SECRETS_DIR": self.secrets, "SENTINEL_DIR": d,
            "SENTINEL_MASTER": "h3"}, f"sentinel-{port}.log")
        wait_for(f"the Sentinel on {port} naming {monitors}",
                 lambda: self.primary(port) == monitors.split(":"), 15)
        return p

    def node_decides(self):
        """redis-node.sh's decision with the three configured Sentinels (the entrypoint stubbed to
        record its arguments): (exit status, its replication.conf or None, its stderr)."""
        d = os.path.join(self.work, "decide")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        stub = os.path.join(d, "entrypoint.sh")
        with open(stub, "w") as f:
            f.write('echo "$@" > "$(dirname "$0")/args"\n')
        env = dict(os.environ, REDIS_SECRETS_DIR=self.secrets, REDIS_ACL_DIR=os.path.join(d, "acl"),
                   REDIS_ANNOUNCE_HOST="127.0.0.1", REDIS_ANNOUNCE_PORT=str(self.redis_ports[1]),
                   REDIS_BOOTSTRAP_PRIMARY=f"127.0.0.1:{self.redis_ports[0]}", SENTINEL_MASTER="h3",
                   SENTINEL_ADDRESSES=" ".join(f"127.0.0.1:{p}" for p in self.sentinel_ports),
                   REDIS_ENTRYPOINT=stub, REDIS_MAJORITY_WAIT_S="1")
        r = subprocess.run(["sh", os.path.join(self.conf, "redis-node.sh")], env=env, capture_output=True,
                           text=True, timeout=60)
        conf = os.path.join(d, "acl", "replication.conf")
        if not os.path.exists(conf):
            return r.returncode, None, r.stderr
        with open(conf) as f:
            return r.returncode, f.read(), r.stderr

    def test_a_node_follows_only_a_majority_of_all_configured_sentinels(self):
        a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        s1, s2, s3 = self.sentinel_ports  # s3 never runs: one of three configured is down
        # Two of three name A: a majority of all three; the node starts as A's replica.
        p1 = self.start_sentinel(s1, a)
        p2 = self.start_sentinel(s2, a)
        rc, conf, err = self.node_decides()
        self.assertEqual(rc, 0, err)
        self.assertIn("replicaof %s %s" % tuple(a.split(":")), conf, err)
        self.assertIn("2 of 3 Sentinels name the primary h3 " + a, err)
        # The admin password (a double quote, a backslash, spaces) quoted as one argument.
        self.assertIn('masterauth "pw-admin-%d \\"q\\\\ \'a\' $HOME `x`"' % os.getpid(), conf)
        # One of three answers (the other two down): the most common answer of those that replied
        # would be A; without a majority of all three the node does not start (exit 1, said why).
        os.killpg(p2.pid, signal.SIGKILL)
        p2.wait()
        rc, conf, err = self.node_decides()
        self.assertEqual(rc, 1, err)
        self.assertIsNone(conf)
        self.assertIn("no majority of the 3 Sentinels (2) names one primary h3", err)
        # Two answer but disagree (one not yet told of a failover): no majority either.
        self.start_sentinel(s2, b)
        rc, conf, err = self.node_decides()
        self.assertEqual(rc, 1, err)
        self.assertIn("no majority", err)
        # None answers (the set's first start): the bootstrap primary.
        for p in (p1, self.procs[-1]):
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        rc, conf, err = self.node_decides()
        self.assertEqual(rc, 0, err)
        self.assertIn("replicaof 127.0.0.1 %d" % self.redis_ports[0], conf)
        self.assertIn("REDIS_BOOTSTRAP_PRIMARY", err)

    def test_failover_with_the_charts_scripts(self):
        old, new = self.redis_ports
        for p in self.redis_ports:
            self.start_node(p)
            wait_for(f"redis on {p}", lambda p=p: self.cli(p, "redis-admin", "PING") == "PONG", 15)
        for i, p in enumerate(self.sentinel_ports):
            self.spawn(["sh", os.path.join(self.conf, "sentinel.sh")], {
                "SENTINEL_ANNOUNCE_HOST": "localhost", "SENTINEL_PORT": str(p), "SENTINEL_ADDRESSES": self.sentinels,
                "REDIS_NODES": f"localhost:{old} localhost:{new}", "REDIS_SECRETS_DIR": self.secrets,
                "SENTINEL_DIR": os.path.join(self.work, f"sentinel-{i}"), "SENTINEL_MASTER": "h3",
                "SENTINEL_DOWN_AFTER_MS": "1000", "SENTINEL_FAILOVER_TIMEOUT_MS": "4000"}, f"sentinel-{i}.log")

        def ready():
            for p in self.sentinel_ports:
                m = self.cli(p, "redis-admin", "SENTINEL", "master", "h3").split("\n")
                d = dict(zip(m[::2], m[1::2]))
                if int(d.get("num-slaves", 0)) < 1 or int(d.get("num-other-sentinels", 0)) < 2:
                    return False
            return True
        wait_for("three Sentinels that know the replica", ready, 30)
        self.assertEqual(self.primary(self.sentinel_ports[0]), ["localhost", str(old)])
        # h3pipe-sentinel may ask where the primary is, nothing else; nobody gets in without a user.
        self.assertIn("NOPERM", self.cli(self.sentinel_ports[0], "h3pipe-sentinel", "SENTINEL", "failover", "h3"))
        r = subprocess.run(["redis-cli", "-p", str(self.sentinel_ports[0]), "SENTINEL", "masters"],
                           capture_output=True, text=True, timeout=10)
        self.assertIn("NOAUTH", r.stdout + r.stderr)
        # A write the replica acknowledged survives the primary's kill -9.
        self.assertEqual(self.cli(old, "redis-admin", "SET", "h3pipe:failover-probe", "kept"), "OK")
        self.assertEqual(self.cli(old, "redis-admin", "WAIT", "1", "5000"), "1")
        pid = int(self.cli(old, "redis-admin", "INFO", "server").split("process_id:")[1].split()[0])
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        wait_for("every Sentinel naming the replica", lambda: all(
            self.primary(p) == ["localhost", str(new)] for p in self.sentinel_ports), 30)
        switched = time.time() - t0
        self.assertEqual(self.cli(new, "redis-admin", "GET", "h3pipe:failover-probe"), "kept")
        # The old primary restarts (its pod's restart): it asks the Sentinels and comes back a replica.
        self.start_node(old)
        wait_for("the old primary a replica of the new one", lambda: self.cli(old, "redis-admin", "ROLE").split("\n")[:3]
                 == ["slave", "localhost", str(new)], 30)
        print(f"\nSentinel scripts: switched {switched:.2f} s after kill -9 (down-after-milliseconds 1000)")
