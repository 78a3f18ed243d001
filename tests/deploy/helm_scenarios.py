#!/usr/bin/python3
"""The values variants deploy_helm.py renders (every one docs/deploy.md names), the values
the chart must refuse, and how to render them: tests/deploy/helmrender, built once per run into
BUILD/helmrender with Debian's golang-go in GOPATH mode (/usr/share/gocode holds Debian's Go
library sources: sprig 3.2.3, sigs.k8s.io/yaml; no module proxy)."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
NS = "gpu"
PATHS = {"src": os.path.abspath(os.path.join(HERE, "..", "..")), "build": None}


def configure(src, build):
    PATHS["src"], PATHS["build"] = src, build


def chart_dir():
    return os.path.join(PATHS["src"], "helm", "h3pipe")


LONG_RELEASE = "a-fifty-three-character-release-name-for-the-limits-x"
assert len(LONG_RELEASE) == 53

KEYS = {"curve": {"keys": {"node292": {"public": "P" * 40, "secret": "S" * 40},
                           "node241": {"public": "Q" * 40, "secret": "T" * 40}}}}


def merged(*parts):
    out = {}
    for p in parts:
        for k, v in p.items():
            out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


POOLS = [
    {"name": "t10x4-a", "host": "node292", "gpus": 4, "gpuModel": "T10", "sharesGpusWith": "",
     "profiles": {"sd": {"kind": "fixed", "seconds": 127.39}}, "runtime": {"name": "sim", "settings": {}},
     "replicas": 1, "nodeSelector": {"gpu": "t10"}, "affinity": {"nodeAffinity": {}},
     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
     "resources": {"limits": {"memory": "32Gi"}, "requests": {"cpu": "4"}}},
    {"name": "t10x2-b", "host": "node241", "gpus": 2, "gpuModel": "T10", "sharesGpusWith": "",
     "profiles": {"sd": {"kind": "fixed", "seconds": 140}}, "runtime": {}, "replicas": 2,
     "nodeSelector": {}, "affinity": {}, "tolerations": [], "resources": {}},
    {"name": "cpu-c", "host": "node241", "gpus": 0, "gpuModel": "none",
     "profiles": {"sd": {"kind": "fixed", "seconds": 900}}},
]
TLS = {"redis": {"tls": {"enabled": True, "existingSecret": "h3pipe-redis-tls"}}}

# name -> (release name, values).  "defaults" is values.yaml alone (a plain `helm install`: the
# CURVE keys come from the hook Job, templates/curve-keys-hook.yaml); "curve-keys" gives them.
SCENARIOS = {
    "defaults": ("h3", {}),
    "curve-keys": ("h3", KEYS),
    "bundled-redis-ephemeral": ("h3", merged(KEYS, {"redis": {"bundled": {"persistence": {"enabled": False}}}})),
    "external-redis": ("h3", merged(KEYS, {"keda": {"enabled": True}, "redis": {
        "passwords": {"sampler": "pw"}, "external": {"enabled": True, "url": "redis://redis.prod.internal:6380"}}})),
    "external-redis-no-port": ("h3", merged(KEYS, {"keda": {"enabled": True}, "redis": {
        "external": {"enabled": True, "url": "redis://redis.prod.internal"}}})),
    "keda": ("h3", merged(KEYS, {"keda": {"enabled": True}})),
    "servicemonitor": ("h3", merged(KEYS, {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}}})),
    "redis-tls": ("h3", merged(KEYS, TLS, {"keda": {"enabled": True}})),
    "sampler-pools": ("h3", {
        "image": {"registry": "registry.example.com"}, "storage": {"existingClaim": "h3pipe-shared"},
        "samplerPools": POOLS, "encoder": {"gpus": 2, "sharesGpusWith": "t10x4-a"}, "keda": {"enabled": True}}),
    "existing-secrets": ("h3", {
        "redis": {"existingSecret": "my-redis", "bundled": {"persistence": {"enabled": False}}},
        "curve": {"existingSecret": "my-curve"}}),
    "no-transfer-curve-off": ("h3", {"transfer": {"enabled": False}, "cluster": {"transfer": {"curve": False}}}),
    "transfer-port": ("h3", {"transfer": {"port": 7800, "dataPort": 7900}}),
    "long-release": (LONG_RELEASE, merged(TLS, {
        "keda": {"enabled": True}, "serviceMonitor": {"enabled": True},
        "samplerPools": [dict(POOLS[0], name="a-sampler-pool-name-of-forty-characters-x")],
        "encoder": {"sharesGpusWith": "a-sampler-pool-name-of-forty-characters-x"}})),
    "release-contains-chart-name": ("prod-h3pipe", {}),
    # Scale-in: each kind of profile, time_scale, a pool's own grace (check_grace, check_keda_scale_in).
    "scale-in": ("h3", merged(KEYS, {"cluster": {"time_scale": 0.5}, "keda": {"enabled": True},
                                     "encoder": {"sharesGpusWith": ""}, "samplerPools": [
        dict(POOLS[1], name="normal", profiles={"sd": {"kind": "normal", "mean": 200, "sd": 40},
                                                 "hd": {"kind": "fixed", "seconds": 90}}),
        dict(POOLS[1], name="cycle", profiles={"sd": {"kind": "cycle", "seconds": [10, 4000, 20]}}),
        dict(POOLS[1], name="own-grace", terminationGracePeriodSeconds=777)],
        "decoder": {"terminationGracePeriodSeconds": 45}})),
    # Redis failover: the bundled primary + replica + three Sentinels, or your Sentinels.
    "sentinel": ("h3", merged(KEYS, {"keda": {"enabled": True}, "encoder": {"sharesGpusWith": ""},
                                     "redis": {"sentinel": {"enabled": True}}})),
    "sentinel-external": ("h3", merged(KEYS, {"keda": {"enabled": True}, "redis": {
        "external": {"enabled": True}, "sentinel": {"enabled": True, "master": "prod", "waitReplicas": 2, "external": {
            "addresses": ["s1.prod.internal:26379", "s2.prod.internal:26379", "s3.prod.internal:26380"]}}}})),
    "sentinel-long-release": (LONG_RELEASE, merged(KEYS, {"redis": {"sentinel": {"enabled": True, "sentinels": 5,
                                                                                 "replicas": 3, "quorum": 3}}})),
    # h3pipe-api (docs/api.md): behind an Ingress with its certificate and the pod's own TLS
    # (stunnel sidecar, API on loopback), with Redis over TLS; or switched off.
    "api-ingress-tls": ("h3", merged(KEYS, TLS, {"api": {
        "replicas": 2, "tls": {"existingSecret": "h3pipe-api-cert"},
        "ingress": {"enabled": True, "className": "nginx", "host": "api.h3.example",
                    "tlsSecret": "h3pipe-api-ingress-cert",
                    "annotations": {"nginx.ingress.kubernetes.io/backend-protocol": "HTTPS"}},
        "nodeSelector": {"h3pipe.io/api": "true"}, "affinity": {"podAntiAffinity": {}},
        "tolerations": [{"key": "api", "operator": "Exists"}]}})),
    "api-off": ("h3", merged(KEYS, {"api": {"enabled": False}})),
    # Numbers where strings belong (Helm reads every YAML number as float64).
    "numeric-strings": ("h3", merged(KEYS, {"image": {"tag": 2}, "redis": {"passwords": {"sampler": 12345}}})),
}
# Secrets the user's values name (the chart cannot render them; the install needs them).
EXTERNAL = {"my-redis", "my-curve", "h3pipe-redis-tls", "h3pipe-api-cert", "h3pipe-api-ingress-cert"}

# name -> (release name, values, what the error must say).
FAILURES = {
    "curve-keys-incomplete": ("h3", {"curve": {"keys": {"node292": KEYS["curve"]["keys"]["node292"]}}},
                              "curve.keys.node241: curve.keys is given but has no key pair for host node241"),
    "curve-keys-and-existing-secret": ("h3", merged(KEYS, {"curve": {"existingSecret": "my-curve"}}),
                                       'curve.existingSecret "my-curve" and curve.keys are both set'),
    "host-name-not-a-secret-key": ("h3", {"cluster": {"hosts": [
        {"name": "node292", "address": "10.0.0.1"}, {"name": "node241", "address": "10.0.0.2"},
        {"name": "gpu/3", "address": "10.0.0.3"}]}}, 'cluster.hosts name "gpu/3"'),
    "release-starts-with-digit": ("3abc", KEYS, "must start with a lowercase letter"),
    "no-sampler-pools": ("h3", merged(KEYS, {"samplerPools": []}), "samplerPools: at least one sampler pool is required"),
    "no-encoder": ("h3", merged(KEYS, {"encoder": {"enabled": False}}), "encoder.enabled: false leaves the cluster without an encode pool"),
    "no-decoder": ("h3", merged(KEYS, {"decoder": {"enabled": False}}), "decoder.enabled: false leaves the cluster without a decode pool"),
    "transfer-port-disagrees": ("h3", merged(KEYS, {"cluster": {"hosts": [
        {"name": "node292", "address": "10.0.0.1", "transfer_port": 7701},
        {"name": "node241", "address": "10.0.0.2"}]}}), "transfer_port 7701 differs from transfer.port 7700"),
    "transfer-data-port-disagrees": ("h3", merged(KEYS, {"cluster": {"hosts": [
        {"name": "node292", "address": "10.0.0.1", "transfer_data_port": 7702},
        {"name": "node241", "address": "10.0.0.2"}]}}), "transfer_data_port 7702 differs from transfer.dataPort 7701"),
    "transfer-data-port-is-the-port": ("h3", merged(KEYS, {"transfer": {"dataPort": 7700}}),
                                       "transfer.dataPort 7700 equals transfer.port"),
    "tls-without-secret": ("h3", merged(KEYS, {"redis": {"tls": {"enabled": True}}}), "redis.tls.existingSecret"),
    "pool-on-unknown-host": ("h3", merged(KEYS, {"decoder": {"host": "node9"}}), 'decoder: host "node9" is not a host'),
    "helm-release-name": ("H3", KEYS, 'invalid release name "H3"'),
    "sentinel-with-tls": ("h3", merged(KEYS, TLS, {"redis": {"sentinel": {"enabled": True}}}),
                          "redis.sentinel.enabled with redis.tls.enabled"),
    "sentinel-without-persistence": ("h3", merged(KEYS, {"redis": {"sentinel": {"enabled": True}, "bundled": {
        "persistence": {"enabled": False}}}}), "redis.sentinel.enabled without redis.bundled.persistence.enabled"),
    "sentinel-no-replica": ("h3", merged(KEYS, {"redis": {"sentinel": {"enabled": True, "replicas": 1}}}),
                            "redis.sentinel.replicas 1: a failover needs a replica"),
    "sentinel-quorum": ("h3", merged(KEYS, {"redis": {"sentinel": {"enabled": True, "quorum": 4}}}),
                        "redis.sentinel.quorum 4 is more than redis.sentinel.sentinels 3"),
    "sentinel-external-no-addresses": ("h3", merged(KEYS, {"redis": {"external": {"enabled": True}, "sentinel": {
        "enabled": True}}}), "redis.sentinel.external.addresses"),
    "shares-unknown-pool": ("h3", merged(KEYS, {"samplerPools": [dict(POOLS[1])]}),
                            'encoder: sharesGpusWith "t10x4-sample" is not a pool'),
}

_renderer = None


def renderer():
    """Builds tests/deploy/helmrender once per run (GOPATH mode on Debian's /usr/share/gocode)."""
    global _renderer
    if _renderer:
        return _renderer
    go = shutil.which("go")
    if not go:
        raise unittest.SkipTest("go not found: install golang-go (scripts/setup.sh)")
    out = os.path.join(PATHS["build"] or os.path.join(PATHS["src"], "build"), "helmrender")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOFLAGS="",
               GOCACHE=os.path.join(out, "gocache"), CGO_ENABLED="0")
    # Built beside and renamed into place: deploy_helm and deploy_helm_schemas may run at once.
    tmp = os.path.join(out, f"helmrender.{os.getpid()}")
    r = subprocess.run([go, "build", "-o", tmp, "."],
                       cwd=os.path.join(HERE, "helmrender"), env=env, capture_output=True, text=True)
    if r.returncode == 0:
        os.replace(tmp, os.path.join(out, "helmrender"))
    if r.returncode:
        raise AssertionError("building helmrender failed (golang-github-masterminds-sprig-dev and "
                             "golang-k8s-sigs-yaml-dev installed?):\n" + r.stderr)
    _renderer = os.path.join(out, "helmrender")
    return _renderer


def run_renderer(release, values, *extra):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump(values, f)  # JSON is YAML
    try:
        return subprocess.run([renderer(), "-chart", chart_dir(), "-name", release, "-namespace", NS,
                               "-f", f.name, *extra], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


def render(name):
    release, values = SCENARIOS[name]
    r = run_renderer(release, values, "-o", "json")
    if r.returncode:
        raise AssertionError(f"{name}: render failed: {r.stderr}")
    return [d["object"] for d in json.loads(r.stdout)["documents"]]


def effective_values(values):
    import yaml
    with open(os.path.join(chart_dir(), "values.yaml")) as f:
        base = yaml.safe_load(f)

    def co(a, b):
        out = dict(a)
        for k, v in b.items():
            out[k] = co(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out
    return co(base, values)


def hook_secrets(jobs):
    """Secrets that a pre-install/pre-upgrade hook Job creates before the release's pods exist
    (the CURVE keys, templates/curve-keys-hook.yaml): name -> the data keys it writes."""
    out = {}
    for j in jobs:
        events = j["metadata"].get("annotations", {}).get("helm.sh/hook", "").split(",")
        env = {e["name"]: e.get("value") for e in j["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        if {"pre-install", "pre-upgrade"} <= set(events) and "SECRET_NAME" in env:
            out[env["SECRET_NAME"]] = {f"{h}.{x}" for h in env["HOSTS"].split() for x in ("pub", "key")}
    return out
