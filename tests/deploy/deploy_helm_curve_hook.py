#!/usr/bin/python3
"""The chart's CURVE key hook (helm/h3pipe/templates/curve-keys-hook.yaml) as Helm would run it.

A plain `helm install` has no curve.keys, and Helm's template functions cannot make Curve25519
keys, so a pre-install/pre-upgrade hook Job in the CLI image creates the Secret <fullname>-curve
that the transfer DaemonSet mounts.  Checked here, on the objects Helm's engine renders
(tests/deploy/helmrender):

- the hook objects: ServiceAccount, Role, RoleBinding before the Job (weights), all deleted
  once it succeeds, the Role exactly get/patch on the one Secret plus create, the pod's
  security context as every h3pipe pod's, and nothing of the release it could depend on (it
  runs before any other object exists); no hook where curve.keys, curve.existingSecret or
  CURVE off make it unneeded;
- the Job's own command (/bin/sh -c SCRIPT, as rendered) run here with the built `h3pipe` CLI
  and curl against FakeKubeApiServer (fake_kube_api.py: HTTPS, bearer token, the Role's rules,
  the API's Status answers): it creates the Secret, keeps it on a second run (upgrade), adds
  only the missing pairs when a host joins, survives a create race (409), and fails with the
  API's message when RBAC refuses or the CA does not match.  Every Secret it posts holds
  <host>.pub/.key for each host, which the transfer service's own loader accepts (receiver and
  sender options from the chart's cluster.json, h3pipe_curve_keys_check), and no key or token
  appears in its output;
- with H3PIPE_HOOK_IMAGE=IMAGE (e.g. localhost/h3pipe/cli:0.1.0) the same script also runs in
  that image with podman (host network, read-only root, uid 10001, no capabilities).

No Kubernetes cluster runs it: the API server is a test double (docs/deploy.md says so).

Usage: deploy_helm_curve_hook.py SOURCE_DIR H3PIPE_CLI CURVE_KEYS_CHECK BUILD_DIR
"""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = sys.argv[1:]
SRC = os.path.abspath(ARGS[0]) if ARGS else os.path.abspath(os.path.join(HERE, "..", ".."))
CLI = os.path.abspath(ARGS[1]) if len(ARGS) > 1 else os.path.join(SRC, "build", "bin", "h3pipe")
KEYS_CHECK = os.path.abspath(ARGS[2]) if len(ARGS) > 2 else os.path.join(SRC, "build", "tests", "h3pipe_curve_keys_check")
BUILD = os.path.abspath(ARGS[3]) if len(ARGS) > 3 else os.path.join(SRC, "build")
sys.path.insert(0, HERE)
from fake_kube_api import FakeKubeApiServer  # noqa: E402
from helm_scenarios import KEYS, NS, configure, hook_secrets, run_renderer  # noqa: E402
configure(SRC, BUILD)

HOOK = "pre-install,pre-upgrade"
THREE_HOSTS = {"cluster": {"hosts": [{"name": "node292", "address": "10.0.0.1"},
                                     {"name": "node241", "address": "10.0.0.2"},
                                     {"name": "node300.gpu.example", "address": "10.0.0.3"}]}}
TOKEN = "fake-sa-token-" + "t" * 40


def render(values, release="h3"):
    r = run_renderer(release, values, "-o", "json")
    if r.returncode:
        raise AssertionError(f"render failed: {r.stderr}")
    by = {}
    for d in json.loads(r.stdout)["documents"]:
        o = d["object"]
        by[(o["kind"], o["metadata"]["name"])] = o
    return by


class Hook:
    """The hook objects and the Job's command and environment of one render."""

    def __init__(self, values):
        self.by = render(values)
        self.job = self.by[("Job", "h3-h3pipe-curve-keys")]
        self.role = self.by[("Role", "h3-h3pipe-curve-keys")]
        self.pod = self.job["spec"]["template"]["spec"]
        self.container = self.pod["containers"][0]
        self.env = {e["name"]: e["value"] for e in self.container["env"]}
        self.cluster = json.loads(self.by[("ConfigMap", "h3-h3pipe-config")]["data"]["cluster.json"])
        self.hosts = [h["name"] for h in self.cluster["hosts"]]


def secret_texts(data):
    """Every key as it could leak: the Z85 text and its base64."""
    out = []
    for v in data.values():
        out += [v, base64.b64decode(v).decode().strip()]
    return out


class HookObjectsTest(unittest.TestCase):
    def test_objects_and_order(self):
        h = Hook({})
        kinds = ["ServiceAccount", "Role", "RoleBinding", "Job"]
        weights = []
        for k in kinds:
            o = h.by[(k, "h3-h3pipe-curve-keys")]
            a = o["metadata"]["annotations"]
            self.assertEqual(a["helm.sh/hook"], HOOK, k)
            self.assertEqual(set(a["helm.sh/hook-delete-policy"].split(",")), {"before-hook-creation", "hook-succeeded"}, k)
            weights.append(int(a["helm.sh/hook-weight"]))
        self.assertEqual(weights, sorted(weights), "ServiceAccount, Role, RoleBinding exist before the Job")
        self.assertEqual(len(set(weights)), len(weights), "distinct weights (Helm orders equal weights by name)")
        rb = h.by[("RoleBinding", "h3-h3pipe-curve-keys")]
        self.assertEqual(rb["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "h3-h3pipe-curve-keys"})
        self.assertEqual(rb["subjects"], [{"kind": "ServiceAccount", "name": "h3-h3pipe-curve-keys", "namespace": NS}])
        self.assertEqual(h.pod["serviceAccountName"], "h3-h3pipe-curve-keys")
        self.assertTrue(h.pod["automountServiceAccountToken"])

    def test_role_is_minimal(self):
        h = Hook({})
        self.assertEqual(h.role["rules"], [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["h3-h3pipe-curve"], "verbs": ["get", "patch"]},
        ])
        self.assertEqual(h.env["SECRET_NAME"], "h3-h3pipe-curve")

    def test_pod(self):
        h = Hook({})
        self.assertEqual(h.container["image"], "h3pipe/cli:0.1.0", "the CLI image: h3pipe keygen and curl")
        self.assertEqual(h.pod["restartPolicy"], "Never")
        sc, psc = h.container["securityContext"], h.pod["securityContext"]
        self.assertEqual((psc["runAsUser"], psc["runAsGroup"], psc["runAsNonRoot"]), (10001, 10001, True))
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"], {"drop": ["ALL"]})
        # It runs before every other object of the release: it may use none of them.
        self.assertEqual([sorted(v) for v in h.pod["volumes"]], [["emptyDir", "name"]])
        self.assertEqual(h.pod["volumes"][0]["emptyDir"]["medium"], "Memory")
        self.assertEqual([m["mountPath"] for m in h.container["volumeMounts"]], [h.env["WORK"]])
        self.assertTrue(all("value" in e for e in h.container["env"]), "no Secret or ConfigMap reference")
        self.assertEqual(h.env["HOSTS"].split(), h.hosts)
        self.assertEqual(h.env["KUBE_API"], "https://kubernetes.default.svc")
        self.assertEqual(h.env["SA_DIR"], "/var/run/secrets/kubernetes.io/serviceaccount")
        self.assertEqual(h.container["command"][:2], ["/bin/sh", "-c"])
        with open(os.path.join(SRC, "helm", "h3pipe", "files", "curve-keys.sh")) as f:
            self.assertEqual(h.container["command"][2], f.read())
        # The DaemonSet's key Secret is the one the Job makes, and its init container takes
        # <node>.key for a node of cluster.hosts: the Job writes one per host.
        ds = h.by[("DaemonSet", "h3-h3pipe-transfer")]
        vols = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}
        self.assertEqual(vols["curve-secret"]["secret"]["secretName"], h.env["SECRET_NAME"])
        self.assertNotIn(("Secret", "h3-h3pipe-curve"), h.by)

    def test_curve_keys_render_the_secret(self):
        by = render(KEYS)
        sec = by[("Secret", "h3-h3pipe-curve")]
        for h, k in KEYS["curve"]["keys"].items():
            self.assertEqual(base64.b64decode(sec["data"][f"{h}.pub"]).decode(), k["public"])
            self.assertEqual(base64.b64decode(sec["data"][f"{h}.key"]).decode(), k["secret"])
        self.assertEqual(hook_secrets([o for (kind, _), o in by.items() if kind == "Job"]), {})
        # Dropping curve.keys later must not delete the keys the hook then finds and keeps.
        self.assertEqual(sec["metadata"]["annotations"], {"helm.sh/resource-policy": "keep"})

    def test_no_hook_where_unneeded(self):
        for name, values in (("curve.keys", KEYS), ("curve.existingSecret", {"curve": {"existingSecret": "my-curve"}}),
                             ("CURVE off", {"cluster": {"transfer": {"curve": False}}}),
                             ("no transfer", {"transfer": {"enabled": False}, "cluster": {"transfer": {"curve": False}}})):
            with self.subTest(name):
                by = render(values)
                self.assertEqual([k for k in by if k[1].endswith("-curve-keys")], [])


@unittest.skipUnless(shutil.which("curl") and shutil.which("openssl"), "curl and openssl are needed (scripts/setup.sh)")
class HookScriptTest(unittest.TestCase):
    """The Job's command against FakeKubeApiServer."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="h3pipe-curve-hook.")
        self.d = self.tmp.name
        self.hook = Hook({})

    def tearDown(self):
        self.tmp.cleanup()

    def server(self, rules=None):
        d = tempfile.mkdtemp(dir=self.d, prefix="pki.")
        return FakeKubeApiServer(d, NS, "h3-h3pipe-curve-keys", TOKEN,
                                 self.hook.role["rules"] if rules is None else rules)

    def run_job(self, srv, hook=None, ca=None):
        """The container's command, with the Job's environment but for where the API, the
        service-account files and the work volume are."""
        hook = hook or self.hook
        sa = srv.service_account_dir(tempfile.mkdtemp(dir=self.d, prefix="sa."))
        if ca:
            shutil.copy(ca, os.path.join(sa, "ca.crt"))
        work = tempfile.mkdtemp(dir=self.d, prefix="work.")
        bindir = tempfile.mkdtemp(dir=self.d, prefix="bin.")
        os.symlink(CLI, os.path.join(bindir, "h3pipe"))
        env = dict(hook.env, KUBE_API=srv.url, SA_DIR=sa, WORK=work, HOME=self.d,
                   PATH=f"{bindir}:/usr/bin:/bin")
        r = subprocess.run(hook.container["command"], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(os.listdir(work), [], "the work volume is left empty")
        return r, r.stdout + r.stderr

    def assert_no_secrets(self, out, data):
        for s in secret_texts(data) + [TOKEN]:
            self.assertNotIn(s, out)

    def assert_keys_load(self, hook, data):
        """Each host's transfer service loads the keys: lay them out as the DaemonSet's init
        container does (every .pub, the node's own .key, 0600) and run the transfer loader."""
        self.assertEqual(set(data), {f"{h}.{x}" for h in hook.hosts for x in ("pub", "key")})
        for host in hook.hosts:
            keys = tempfile.mkdtemp(dir=self.d, prefix=f"keys-{host}.")
            for k, v in data.items():
                if k.endswith(".pub") or k == f"{host}.key":
                    p = os.path.join(keys, k)
                    with open(p, "wb") as f:
                        f.write(base64.b64decode(v))
                    os.chmod(p, 0o600)
            cluster = json.loads(json.dumps(hook.cluster))
            for h in cluster["hosts"]:
                for field in ("transfer_public_key_file", "transfer_secret_key_file"):
                    h[field] = os.path.join(keys, os.path.basename(h[field]))
            cfg = os.path.join(keys, "cluster.json")
            with open(cfg, "w") as f:
                json.dump(cluster, f)
            r = subprocess.run([KEYS_CHECK, cfg, host], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, f"{host}: {r.stderr}")
            self.assertIn("keys ok", r.stdout)
            self.assertNotRegex(r.stdout, "CURVE off")

    def methods(self, srv):
        return [(m, p.rsplit("/", 1)[-1]) for m, p, _, _ in srv.requests]

    def test_creates_then_keeps(self):
        with self.server() as srv:
            r, out = self.run_job(srv)
            self.assertEqual(r.returncode, 0, out)
            self.assertEqual(self.methods(srv), [("GET", "h3-h3pipe-curve"), ("POST", "secrets")])
            self.assertEqual(srv.requests[1][2], "application/json")
            sec = srv.secrets["h3-h3pipe-curve"]
            self.assertEqual(sec["type"], "Opaque")
            self.assertEqual(sec["metadata"]["labels"]["app.kubernetes.io/instance"], "h3")
            data = dict(sec["data"])
            self.assert_keys_load(self.hook, data)
            self.assertEqual(len({base64.b64decode(v) for v in data.values()}), len(data), "a pair per host")
            self.assert_no_secrets(out, data)
            self.assertIn("created Secret h3-h3pipe-curve", out)
            # helm upgrade: the hook runs again and keeps every key.
            r, out = self.run_job(srv)
            self.assertEqual(r.returncode, 0, out)
            self.assertEqual(self.methods(srv)[2:], [("GET", "h3-h3pipe-curve")])
            self.assertEqual(srv.secrets["h3-h3pipe-curve"]["data"], data)
            self.assertIn("kept", out)

    def test_a_new_host_gets_only_its_pair(self):
        three = Hook(THREE_HOSTS)
        with self.server() as srv:
            r, out = self.run_job(srv)
            self.assertEqual(r.returncode, 0, out)
            before = dict(srv.secrets["h3-h3pipe-curve"]["data"])
            r, out = self.run_job(srv, hook=three)
            self.assertEqual(r.returncode, 0, out)
            self.assertEqual(self.methods(srv)[2:], [("GET", "h3-h3pipe-curve"), ("PATCH", "h3-h3pipe-curve")])
            self.assertEqual(srv.requests[3][2], "application/merge-patch+json")
            self.assertEqual(set(srv.requests[3][3]["data"]), {"node300.gpu.example.pub", "node300.gpu.example.key"})
            after = srv.secrets["h3-h3pipe-curve"]["data"]
            self.assertEqual({k: after[k] for k in before}, before, "the other hosts' keys are kept")
            self.assert_keys_load(three, dict(after))
            self.assert_no_secrets(out, after)

    def test_a_half_pair_is_replaced(self):
        with self.server() as srv:
            r, out = self.run_job(srv)
            data = dict(srv.secrets["h3-h3pipe-curve"]["data"])
            del srv.secrets["h3-h3pipe-curve"]["data"]["node241.key"]
            r, out = self.run_job(srv)
            self.assertEqual(r.returncode, 0, out)
            after = srv.secrets["h3-h3pipe-curve"]["data"]
            self.assertEqual((after["node292.pub"], after["node292.key"]), (data["node292.pub"], data["node292.key"]))
            self.assertNotEqual(after["node241.pub"], data["node241.pub"])
            self.assert_keys_load(self.hook, dict(after))

    def test_create_race(self):
        """Another writer creates the Secret between the Job's GET and POST: 409, then kept."""
        with self.server() as srv:
            theirs = {}

            def concurrent():
                srv.before_post = None
                for h in self.hook.hosts:
                    kd = tempfile.mkdtemp(dir=self.d)
                    subprocess.run([CLI, "keygen", "--dir", kd, "--name", h], check=True, capture_output=True)
                    for x in ("pub", "key"):
                        with open(os.path.join(kd, f"{h}.{x}"), "rb") as f:
                            theirs[f"{h}.{x}"] = base64.b64encode(f.read()).decode()
                srv.secrets["h3-h3pipe-curve"] = srv.stored("h3-h3pipe-curve", {}, dict(theirs), "Opaque")
            srv.before_post = concurrent
            r, out = self.run_job(srv)
            self.assertEqual(r.returncode, 0, out)
            self.assertEqual(self.methods(srv), [("GET", "h3-h3pipe-curve"), ("POST", "secrets"), ("GET", "h3-h3pipe-curve")])
            self.assertEqual(srv.secrets["h3-h3pipe-curve"]["data"], theirs)
            self.assertIn("created meanwhile", out)

    def test_rbac_refusal_names_it(self):
        get_only = [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["h3-h3pipe-curve"], "verbs": ["get"]}]
        with self.server(rules=get_only) as srv:
            r, out = self.run_job(srv)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn('POST', out)
            self.assertIn('HTTP 403: secrets is forbidden: User "system:serviceaccount:gpu:h3-h3pipe-curve-keys" '
                          'cannot create resource "secrets" in API group "" in the namespace "gpu"', out)
            self.assertEqual(srv.secrets, {})
            posted = srv.requests[-1][3]["data"]
            self.assert_no_secrets(out, posted)
        # A rule limited by name never matches create (the request carries no name).
        named = [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["h3-h3pipe-curve"], "verbs": ["get", "create"]}]
        with self.server(rules=named) as srv:
            r, out = self.run_job(srv)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("cannot create resource", out)

    def test_wrong_ca_fails(self):
        with self.server() as srv, self.server() as other:
            r, out = self.run_job(srv, ca=other.ca)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("GET", out)
            self.assertRegex(out, r"certificate|SSL")
            self.assertEqual(srv.requests, [], "nothing reached the API")

    @unittest.skipUnless(os.environ.get("H3PIPE_HOOK_IMAGE"), "set H3PIPE_HOOK_IMAGE=IMAGE to run the script in the CLI image")
    def test_in_the_cli_image(self):
        image = os.environ["H3PIPE_HOOK_IMAGE"]
        with self.server() as srv:
            sa = srv.service_account_dir(tempfile.mkdtemp(dir=self.d, prefix="sa."))
            for f in os.listdir(sa):
                os.chmod(os.path.join(sa, f), 0o644)
            os.chmod(sa, 0o755)
            env_args = []
            for k, v in dict(self.hook.env, KUBE_API=srv.url).items():
                env_args += ["-e", f"{k}={v}"]
            cmd = ["podman", "run", "--rm", "--network=host", "--read-only", "--user", "10001:10001",
                   "--cap-drop=ALL", "--security-opt=no-new-privileges",
                   "-v", f"{sa}:{self.hook.env['SA_DIR']}:ro", "--tmpfs", f"{self.hook.env['WORK']}:rw,size=1m,mode=1777",
                   *env_args, "--entrypoint", self.hook.container["command"][0], image, *self.hook.container["command"][1:]]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            out = r.stdout + r.stderr
            self.assertEqual(r.returncode, 0, out)
            self.assertEqual(self.methods(srv), [("GET", "h3-h3pipe-curve"), ("POST", "secrets")])
            data = dict(srv.secrets["h3-h3pipe-curve"]["data"])
            self.assert_keys_load(self.hook, data)
            self.assert_no_secrets(out, data)
            print(f"in {image}: {out.strip()}")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
