#!/usr/bin/python3
"""compose.sentinel.yaml run for real on one host (issue #23 item 3); deploy_container runs it.

With podman's Docker API and Debian's docker-compose (as docker/one-host.sh): compose.yaml +
compose.sentinel.yaml, profiles control, sampler-host, decoder-host (Redis primary + replica + three
Sentinels, encoder, sampler0, decoder, transfer) from the built images h3pipe/*:<version> and the
stand-in Redis (scripts/images.sh --standins).  Every Redis and Sentinel announces ANNOUNCE (default:
the host's first non-loopback IPv4 address), which the containers and the host both reach.
Checks: the Sentinels name the primary; the replica is in sync; the host's CLI (build/bin/h3pipe,
cluster config naming the Sentinels) runs a batch to one MP4 per job; then a second batch during
which the primary is killed with SIGKILL: the Sentinels promote the replica and the batch still
finishes with one MP4 per job.  Tears everything down.  Prints one JSON line last.
Needs root, podman, docker-compose, redis-cli.
  sudo tests/deploy/compose_sentinel_run.py [--jobs N] [--down-after-ms MS] [--keep]
"""
import argparse
import glob
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROJECT = "h3sent"
SERVICES = {"encoder": 9501, "sampler0": 9502, "decoder": 9504, "transfer": 9505}
REDIS = ["redis", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"]
SENTINEL_PORTS = (26379, 26380, 26381)
result = {"ok": False, "checks": {}}


def run(cmd, timeout=120, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError("%s: rc %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout[-2000:], r.stderr[-2000:]))
    return r


def check(name, ok, detail=""):
    result["checks"][name] = bool(ok)
    print("%s %s %s" % ("PASS" if ok else "FAIL", name, detail if not ok or detail else ""), flush=True)
    return ok


def wait_for(what, pred, deadline_s, every=0.2):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise TimeoutError("%s: not within %.0f s" % (what, deadline_s))


def host_address():
    out = run(["ip", "-4", "-o", "addr", "show", "scope", "global"]).stdout.split()
    for i, w in enumerate(out):
        if w == "inet":
            return out[i + 1].split("/")[0]
    return socket.gethostbyname(socket.gethostname())


def readyz(port):
    try:
        r = run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "1",
                 "http://127.0.0.1:%d/readyz" % port], check=False, timeout=5)
        return r.stdout == "200"
    except subprocess.TimeoutExpired:
        return False


class Site:
    def __init__(self, d, announce, down_after_ms, jobs):
        self.d, self.announce = d, announce
        self.secrets, self.data, self.keys = (os.path.join(d, k) for k in ("secrets", "data", "keys"))
        self.cli_state = os.path.join(d, "cli-state")
        for p in (self.secrets, self.cli_state):
            os.makedirs(p, mode=0o700)
        for p in (self.data, self.keys):
            os.makedirs(p)
            os.chown(p, 10001, 10001)
            os.chmod(p, 0o750)
        for u in ("encoder", "sampler", "decoder", "transfer", "operator", "admin", "sentinel"):
            p = os.path.join(self.secrets, "redis-%s.password" % u)
            open(p, "w").write(hashlib.sha256(os.urandom(16)).hexdigest() + "\n")
            os.chown(p, 10001, 10001)
            os.chmod(p, 0o400)
        open(os.path.join(self.secrets, "grafana_admin_password"), "w").write("unused\n")
        for u in ("operator", "sentinel", "admin"):  # the host's CLI and redis-cli read these as root
            shutil.copy(os.path.join(self.secrets, "redis-%s.password" % u), self.cli_state)
        self.admin = self.secret("admin")
        self.sentinel_pw = self.secret("sentinel")
        sentinel = {"addresses": ["%s:%d" % (announce, p) for p in SENTINEL_PORTS], "master": "h3",
                    "user": "h3pipe-sentinel", "password_file": "/run/secrets/redis-sentinel.password"}
        cfg = {"name": "sentinel-one-host", "dispatch": "completion_time",
               "state_dir": "/var/lib/h3pipe/state", "artifact_root": "/var/lib/h3pipe/artifacts",
               "output_root": "/var/lib/h3pipe/outputs",
               "redis": {"embedded": False, "user": "h3pipe-operator",
                         "password_file": "/run/secrets/redis-operator.password", "sentinel": sentinel,
                         "wait_replicas": 1, "wait_timeout_ms": 1000},
               "queue": {"lease_ms": 5000, "renew_ms": 1000, "sweep_ms": 1000, "max_deliveries": 5, "block_ms": 200},
               "transfer": {"curve": False},
               "stages": {s: {"runtime": {"name": "builtin", "settings": {}}} for s in ("encode", "sample", "decode")},
               "classes": [{"name": "demo", "width": 256, "height": 256, "frames": 49, "steps": 6}],
               "hosts": [{"name": "local", "address": "127.0.0.1", "bind": "0.0.0.0", "transfer_port": 7700}],
               "pools": [{"name": "encoder", "host": "local", "stage": "encode",
                          "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
                         {"name": "sampler0", "host": "local", "stage": "sample", "gpus": [0],
                          "profiles": {"default": {"kind": "fixed", "seconds": 0.4}}},
                         {"name": "decoder", "host": "local", "stage": "decode",
                          "profiles": {"default": {"kind": "fixed", "seconds": 0.1}}}]}
        self.cluster = os.path.join(d, "cluster.json")
        json.dump(cfg, open(self.cluster, "w"), indent=1)
        cli = dict(cfg, state_dir=self.cli_state, artifact_root=self.data + "/artifacts",
                   output_root=self.data + "/outputs",
                   redis=dict(cfg["redis"], password_file=self.cli_state + "/redis-operator.password",
                              sentinel=dict(sentinel, password_file=self.cli_state + "/redis-sentinel.password")))
        self.cli = os.path.join(d, "cli.json")
        json.dump(cli, open(self.cli, "w"), indent=1)
        version = run(["sed", "-n", r"s/^project(h3pipe VERSION \([0-9.]*\).*/\1/p",
                       os.path.join(REPO, "CMakeLists.txt")]).stdout.strip()
        self.env = os.path.join(d, "site.env")
        open(self.env, "w").write("\n".join([
            "COMPOSE_PROFILES=control,sampler-host,decoder-host", "H3PIPE_HOST=local",
            "H3PIPE_CONFIG_FILE=" + self.cluster, "H3PIPE_KEYS_DIR=" + self.keys, "H3PIPE_DATA_DIR=" + self.data,
            "H3PIPE_SECRETS_DIR=" + self.secrets,
            "H3PIPE_GRAFANA_PASSWORD_FILE=" + os.path.join(self.secrets, "grafana_admin_password"),
            "H3PIPE_ENCODER_POOL=encoder", "H3PIPE_SAMPLER0_POOL=sampler0", "H3PIPE_DECODER_POOL=decoder",
            "H3PIPE_VERSION=" + version, "H3PIPE_REDIS_ANNOUNCE_HOST=" + announce,
            "H3PIPE_SENTINEL_DOWN_AFTER_MS=%d" % down_after_ms,
            "H3PIPE_SENTINEL_FAILOVER_TIMEOUT_MS=%d" % max(6000, 3 * down_after_ms),
            "H3PIPE_REDIS_IMAGE=" + os.environ.get("H3PIPE_REDIS_IMAGE", "localhost/h3pipe-standin/redis:latest"),
            "H3PIPE_PROMETHEUS_IMAGE=localhost/h3pipe-standin/prometheus:latest", ""]))
        self.batches = []
        for b in range(2):
            p = os.path.join(d, "batch%d.jsonl" % b)
            with open(p, "w") as f:
                for i in range(jobs):
                    f.write(json.dumps({"jobId": "b%d-%d" % (b, i), "prompt": "sentinel run %d/%d" % (b, i),
                                        "width": 256, "height": 256, "frames": 49, "fps": 24, "steps": 6,
                                        "seed": i + 1}) + "\n")
            self.batches.append(p)

    def secret(self, u):
        return open(os.path.join(self.secrets, "redis-%s.password" % u)).read().strip()

    def sentinel(self, port, *args):
        env = dict(os.environ, REDISCLI_AUTH=self.sentinel_pw)
        r = run(["redis-cli", "--no-auth-warning", "--raw", "-h", self.announce, "-p", str(port), "--user",
                 "h3pipe-sentinel"] + list(args), check=False, timeout=5, env=env)
        return r.stdout.split()

    def redis(self, port, *args):
        env = dict(os.environ, REDISCLI_AUTH=self.admin)
        r = run(["redis-cli", "--no-auth-warning", "--raw", "-h", self.announce, "-p", str(port), "--user",
                 "redis-admin"] + list(args), check=False, timeout=5, env=env)
        return r.stdout

    def primary(self, port=26379):
        a = self.sentinel(port, "SENTINEL", "get-master-addr-by-name", "h3")
        return "%s:%s" % (a[0], a[1]) if len(a) == 2 else ""

    def mp4s(self, run_id=None):
        return sorted(glob.glob(os.path.join(self.data, "outputs", run_id or "*", "*.mp4")))


def info(text):
    return dict(l.strip().split(":", 1) for l in text.splitlines() if ":" in l and not l.startswith("#"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--down-after-ms", type=int, default=2000)
    ap.add_argument("--announce", default=os.environ.get("H3PIPE_REDIS_ANNOUNCE_HOST") or host_address())
    ap.add_argument("--keep", action="store_true", help="leave it up (tear down by hand)")
    ap.add_argument("--cli", default=os.path.join(REPO, "build", "bin", "h3pipe"), help="the host's h3pipe")
    a = ap.parse_args()
    if os.getuid() != 0:
        sys.exit("needs root (secrets and data belong to uid 10001)")
    t_start = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="h3sent-")
    os.chmod(tmp, 0o755)
    env = dict(os.environ)
    if not env.get("CONTAINERS_CONF"):
        env["CONTAINERS_CONF"] = os.path.join(tmp, "containers.conf")
        run([os.path.join(REPO, "scripts", "images.sh"), "--containers-conf", env["CONTAINERS_CONF"]], env=env)
    sock = os.path.join(tmp, "podman.sock")
    env["DOCKER_HOST"] = "unix://" + sock
    svc = subprocess.Popen(["podman", "system", "service", "--time=0", env["DOCKER_HOST"]],
                           stdout=open(os.path.join(tmp, "podman-service.log"), "w"), stderr=subprocess.STDOUT, env=env)
    site = Site(tmp, a.announce, a.down_after_ms, a.jobs)
    result.update(announce=a.announce, jobs=a.jobs, down_after_ms=a.down_after_ms, dir=tmp)
    compose = ["docker-compose", "--project-name", PROJECT, "--project-directory", REPO,
               "-f", os.path.join(REPO, "compose.yaml"), "-f", os.path.join(REPO, "compose.sentinel.yaml"),
               "--env-file", site.env]
    cli_env = dict(os.environ)
    cli_env.pop("DOCKER_HOST", None)
    cli = [os.path.abspath(a.cli), "--config", site.cli]
    try:
        wait_for("podman API", lambda: run(["curl", "-sf", "--unix-socket", sock, "http://d/_ping"],
                                           check=False).returncode == 0, 30)
        t0 = time.monotonic()
        up = run(compose + ["up", "-d", "--no-build"] + REDIS + list(SERVICES), timeout=300, check=False, env=env)
        if not check("compose.up", up.returncode == 0, (up.stdout + up.stderr)[-3000:]):
            return
        for s, port in SERVICES.items():
            try:
                wait_for(s + " /readyz", lambda: readyz(port), 120, 0.5)
            except TimeoutError as e:
                check("ready[%s]" % s, False, str(e))
                return
        result["up_s"] = round(time.monotonic() - t0, 1)
        # The Sentinels agree on the primary, and the replica is in sync.
        primary0 = "%s:6379" % a.announce
        try:
            wait_for("Sentinels name the primary",
                     lambda: all(site.primary(p) == primary0 for p in SENTINEL_PORTS), 30)
            ok = True
        except TimeoutError:
            ok = False
        check("sentinel.primary", ok, str([site.primary(p) for p in SENTINEL_PORTS]))
        try:
            wait_for("replica in sync", lambda: info(site.redis(6381, "INFO", "replication")).get(
                "master_link_status") == "up", 30)
        except TimeoutError:
            pass
        rep = info(site.redis(6381, "INFO", "replication"))
        prim = info(site.redis(6379, "INFO", "replication"))
        check("replica.in_sync", rep.get("role") == "slave" and rep.get("master_link_status") == "up" and
              prim.get("connected_slaves") == "1", "replica %s; primary %s" % (rep, prim))
        result["replica"] = {k: rep.get(k) for k in ("role", "master_host", "master_port", "master_link_status")}
        result["primary_slave0"] = prim.get("slave0")
        # Each Sentinel learns the replica from the primary's INFO (every 10 s) and the others
        # from the hello channel (every 2 s): a failover needs both.
        def sentinel_master(port):
            r = site.sentinel(port, "SENTINEL", "master", "h3")
            return dict(zip(r[::2], r[1::2]))
        t0 = time.monotonic()
        try:
            wait_for("Sentinels know the replica and each other", lambda: all(
                sentinel_master(p).get("num-slaves") == "1" and sentinel_master(p).get("num-other-sentinels") == "2"
                for p in SENTINEL_PORTS), 30, 0.5)
        except TimeoutError:
            pass
        result["sentinels_complete_s"] = round(time.monotonic() - t0, 1)
        m = sentinel_master(26379)
        check("sentinel.peers", m.get("num-other-sentinels") == "2" and m.get("num-slaves") == "1", str(m))
        # Batch 1: the CLI on the host, through the Sentinels.
        t0 = time.monotonic()
        r = run(cli + ["run", site.batches[0]], timeout=300, check=False, env=cli_env)
        result["batch1_s"] = round(time.monotonic() - t0, 1)
        check("batch1.rc0", r.returncode == 0, (r.stdout + r.stderr)[-2000:])
        n1 = len(site.mp4s())
        check("batch1.one_mp4_per_job", n1 == a.jobs, "%d mp4s" % n1)
        # Batch 2: SIGKILL the primary once its first job is out.
        before = set(site.mp4s())
        t0 = time.monotonic()
        proc = subprocess.Popen(cli + ["run", site.batches[1]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=cli_env)
        wait_for("a first MP4 of batch 2", lambda: len(set(site.mp4s()) - before) >= 1, 120, 0.05)
        done_at_kill = len(set(site.mp4s()) - before)
        cid = run(compose + ["ps", "-q", "redis"], env=env).stdout.strip()
        t_kill = time.monotonic()
        run(["podman", "kill", "-s", "KILL", cid], env=env)
        result["jobs_done_at_kill"] = done_at_kill
        replica = "%s:6381" % a.announce
        t_promo = t_next = None
        seen = set(site.mp4s())
        while time.monotonic() - t_kill < 120 and (t_promo is None or t_next is None):
            if t_promo is None and site.primary() == replica:
                t_promo = time.monotonic()
            if t_next is None and set(site.mp4s()) - seen:
                t_next = time.monotonic()
            time.sleep(0.05)
        result["kill_to_promotion_s"] = round(t_promo - t_kill, 2) if t_promo else None
        result["kill_to_next_mp4_s"] = round(t_next - t_kill, 2) if t_next else None
        check("failover.promoted", t_promo is not None, "Sentinel still names %s" % site.primary())
        try:
            out, _ = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        result["batch2_s"] = round(time.monotonic() - t0, 1)
        check("batch2.rc0", proc.returncode == 0, out[-2000:])
        new = set(site.mp4s()) - before
        check("batch2.one_mp4_per_job", len(new) == a.jobs and
              sorted(os.path.basename(p) for p in new) == sorted("b1-%d.mp4" % i for i in range(a.jobs)),
              "%d mp4s: %s" % (len(new), sorted(new)))
        result["batch2_mp4s"] = len(new)
        # The old primary, started again (podman does not apply the restart policy after `podman
        # kill`): redis-node.sh asks the Sentinels and it must come back as the new one's replica.
        run(["podman", "start", cid], env=env, check=False)
        t_start_old = time.monotonic()
        try:
            wait_for("old primary re-joins as a replica", lambda: info(site.redis(6379, "INFO", "replication")).get(
                "master_link_status") == "up", 60, 0.5)
            ok = True
        except TimeoutError:
            ok = False
        result["restart_to_rejoin_s"] = round(time.monotonic() - t_start_old, 2) if ok else None
        old = info(site.redis(6379, "INFO", "replication"))
        check("old_primary.rejoined_as_replica", ok and old.get("role") == "slave" and
              "%s:%s" % (old.get("master_host"), old.get("master_port")) == replica, str(old)[:500])
        result["primaries_named"] = [site.primary(p) for p in SENTINEL_PORTS]
    except Exception as e:  # reported, then torn down
        check("exception", False, repr(e)[-3000:])
    finally:
        if not all(result["checks"].values()):
            for name in REDIS + list(SERVICES):
                logs = run(compose + ["logs", "--no-color", "--tail=12", name], env=env, check=False, timeout=60)
                print("\n".join(l[:400] for l in logs.stdout.splitlines() if "effective config" not in l), flush=True)
        if not a.keep:
            run(compose + ["down", "-v", "--remove-orphans", "-t", "5"], env=env, check=False, timeout=180)
            label = "label=com.docker.compose.project=" + PROJECT
            left = run(["podman", "ps", "-aq", "--filter", label], env=env, check=False).stdout.split()
            if left:
                run(["podman", "rm", "-f", "-t", "0"] + left, env=env, check=False, timeout=120)
            for kind in ("network", "volume"):
                names = run(["podman", kind, "ls", "-q", "--filter", label], env=env, check=False).stdout.split()
                if names:
                    run(["podman", kind, "rm", "-f"] + names, env=env, check=False, timeout=60)
            svc.terminate()
            try:
                svc.wait(10)
            except subprocess.TimeoutExpired:
                svc.kill()
            left = run(["podman", "ps", "-aq", "--filter", label], env=env, check=False).stdout.split()
            result["left_running"] = len(left)
            shutil.rmtree(tmp, ignore_errors=True)
        result["total_s"] = round(time.monotonic() - t_start, 1)
        result["ok"] = bool(result["checks"]) and all(result["checks"].values())
        print(json.dumps(result), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
