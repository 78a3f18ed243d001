"""Two hosts through compose, for tests/deploy/deploy_container.py (which passes itself as `t`).

Host cta (the test's own network namespace): control (Redis, stand-in) + redis-tls (stunnel
server) + sampler-host (encoder, sampler0, transfer).  Host ctb (a second network namespace and a
private mount namespace, so that podman's network state and DNS server are its own, with its own
podman store reading the images from the main one): redis-tunnel (stunnel client to cta:6380) +
decoder-host (decoder, transfer).  A veth pair joins them (10.231.0.1 / 10.231.0.2).  CURVE keys
are made with the CLI image's keygen, as docs/deploy.md tells; the TLS certificates with openssl.
A batch submitted on cta is sampled there, its latents cross over CURVE, and it is decoded on ctb:
the MP4s land in ctb's data folder.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import time

A_IP, B_IP = "10.231.0.1", "10.231.0.2"
JOBS = 2


def _certs(t, d):
    os.makedirs(d)
    script = """set -e
cd "$1"
printf 'subjectAltName=DNS:redis.h3pipe.internal\\n' > san.ext
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out h3pipe_ca.pem -days 1 -subj /CN=ct-ca
gen() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout $1_key.pem -out $1.csr -subj /CN=$2
        openssl x509 -req -in $1.csr -CA h3pipe_ca.pem -CAkey ca.key -CAcreateserial -out $1_cert.pem -days 1 $3; }
gen redis_tls redis.h3pipe.internal "-extfile san.ext"
gen redis_client ctb ""
"""
    t.run(["sh", "-c", script, "certs", d])


def _host_dir(t, tmp, name, users, tls_files, certs):
    h = {k: os.path.join(tmp, name, k) for k in ("secrets", "keys", "data")}
    for d in h.values():
        os.makedirs(d)
    for d in ("keys", "data"):
        os.chown(h[d], 10001, 10001)
        os.chmod(h[d], 0o750)
    for user, pw in users.items():
        p = os.path.join(h["secrets"], "redis-%s.password" % user)
        open(p, "w").write(pw + "\n")
    for f in tls_files:
        shutil.copy(os.path.join(certs, f), os.path.join(h["secrets"], f))
    for f in os.listdir(h["secrets"]):
        os.chown(os.path.join(h["secrets"], f), 10001, 10001)
        os.chmod(os.path.join(h["secrets"], f), 0o400)
    open(os.path.join(h["secrets"], "grafana_admin_password"), "w").write("unused\n")
    return h


def _config(path):
    host = lambda n, ip: {"name": n, "address": ip, "bind": "0.0.0.0", "transfer_port": 7700,  # noqa: E731
                          "transfer_public_key_file": "/etc/h3pipe/keys/%s.pub" % n,
                          "transfer_secret_key_file": "/etc/h3pipe/keys/%s.key" % n}
    cfg = {
        "name": "ct2", "state_dir": "/var/lib/h3pipe/state", "artifact_root": "/var/lib/h3pipe/artifacts",
        "output_root": "/var/lib/h3pipe/outputs", "dispatch": "completion_time",
        "redis": {"host": "127.0.0.1", "port": 6379, "user": "h3pipe-operator",
                  "password_file": "/run/secrets/redis-operator.password", "embedded": False},
        "queue": {"lease_ms": 5000, "renew_ms": 1000, "sweep_ms": 1000, "max_deliveries": 3, "block_ms": 200},
        "transfer": {"curve": True},
        "stages": {s: {"runtime": {"name": "builtin", "settings": {}}} for s in ("encode", "sample", "decode")},
        "classes": [{"name": "demo", "width": 256, "height": 256, "frames": 49, "steps": 6}],
        "hosts": [host("cta", A_IP), host("ctb", B_IP)],
        "pools": [
            {"name": "encoder", "host": "cta", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
            {"name": "sampler0", "host": "cta", "stage": "sample", "gpus": [0],
             "profiles": {"default": {"kind": "fixed", "seconds": 0.4}}},
            {"name": "decoder", "host": "ctb", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.1}}}],
        "links": [{"from": "cta", "to": "ctb", "gbps": 1.0, "latency_ms": 0.1}],
    }
    json.dump(cfg, open(path, "w"), indent=1)


def _env_file(path, h, conf, version, lines):
    open(path, "w").write("\n".join([
        "H3PIPE_CONFIG_FILE=" + conf, "H3PIPE_KEYS_DIR=" + h["keys"], "H3PIPE_DATA_DIR=" + h["data"],
        "H3PIPE_SECRETS_DIR=" + h["secrets"],
        "H3PIPE_GRAFANA_PASSWORD_FILE=" + os.path.join(h["secrets"], "grafana_admin_password"),
        "H3PIPE_VERSION=" + version, "H3PIPE_REDIS_IMAGE=localhost/h3pipe-standin/redis:latest"] + lines + [""]))


def check_two_hosts(t, repo, tmp, version, env_a):
    root = os.path.join(tmp, "two")
    os.makedirs(root)
    certs = os.path.join(root, "certs")
    _certs(t, certs)
    pw = {u: os.urandom(16).hex() for u in ("encoder", "sampler", "decoder", "transfer", "operator", "admin")}
    a = _host_dir(t, root, "cta", pw, ["h3pipe_ca.pem", "redis_tls_cert.pem", "redis_tls_key.pem"], certs)
    b = _host_dir(t, root, "ctb", {u: pw[u] for u in ("decoder", "transfer")},
                  ["h3pipe_ca.pem", "redis_client_cert.pem", "redis_client_key.pem"], certs)
    conf = os.path.join(root, "cluster.json")
    _config(conf)
    env_a_file, env_b_file = os.path.join(root, "cta.env"), os.path.join(root, "ctb.env")
    _env_file(env_a_file, a, conf, version, [
        "COMPOSE_PROFILES=control,redis-tls,sampler-host,tools", "H3PIPE_HOST=cta",
        "H3PIPE_ENCODER_POOL=encoder", "H3PIPE_SAMPLER0_POOL=sampler0",
        "H3PIPE_REDIS_PUBLISH=127.0.0.1:6379", "H3PIPE_REDIS_ADDRESS=redis:6379"])
    _env_file(env_b_file, b, conf, version, [
        "COMPOSE_PROFILES=decoder-host,redis-tunnel,tools", "H3PIPE_HOST=ctb", "H3PIPE_DECODER_POOL=decoder",
        "H3PIPE_REDIS_TLS_CONNECT=%s:6380" % A_IP, "H3PIPE_REDIS_ADDRESS=redis-tunnel:6379"])
    batch = os.path.join(a["data"], "batch.jsonl")
    with open(batch, "w") as f:
        for i in range(JOBS):
            f.write(json.dumps({"jobId": "two-%d" % i, "prompt": "two hosts %d" % i, "width": 256, "height": 256,
                                "frames": 49, "fps": 24, "steps": 6, "seed": 10 + i}) + "\n")
    os.chown(batch, 10001, 10001)

    # Host ctb: a holder process owns its network and mount namespaces.
    storage = os.path.join(root, "storage-b.conf")
    open(storage, "w").write('[storage]\ndriver = "overlay"\ngraphroot = "%s"\nrunroot = "%s"\n'
                             '[storage.options]\nadditionalimagestores = ["/var/lib/containers/storage"]\n'
                             % (os.path.join(root, "b-root"), os.path.join(root, "b-run")))
    holder = subprocess.Popen(["unshare", "--net", "--mount", "--propagation", "private", "--", "sh", "-c",
                               "mkdir -p /run/containers/networks && mount -t tmpfs tmpfs /run/containers/networks"
                               " && mount -t tmpfs tmpfs /run/libpod 2>/dev/null; mkdir -p /run/libpod;"
                               " echo ready; exec sleep 3600"], stdout=subprocess.PIPE, text=True)
    services = []
    compose_a = ["docker-compose", "--project-name", "cta", "--project-directory", repo,
                 "-f", os.path.join(repo, "compose.yaml"), "--env-file", env_a_file]
    compose_b = ["nsenter", "-t", str(holder.pid), "--net", "--mount", "--"] + \
        ["docker-compose", "--project-name", "ctb", "--project-directory", repo,
         "-f", os.path.join(repo, "compose.yaml"), "--env-file", env_b_file]
    env_b = dict(env_a, CONTAINERS_STORAGE_CONF=storage, DOCKER_HOST="unix://" + os.path.join(root, "b.sock"))
    try:
        t.check("two.holder", holder.stdout.readline().strip() == "ready")
        t.run(["ip", "link", "add", "ct-va", "type", "veth", "peer", "name", "ct-vb", "netns", str(holder.pid)])
        t.run(["ip", "addr", "add", A_IP + "/24", "dev", "ct-va"])
        t.run(["ip", "link", "set", "ct-va", "up"])
        nsb = ["nsenter", "-t", str(holder.pid), "--net", "--mount", "--"]
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", B_IP + "/24", "dev", "ct-vb"],
                    ["ip", "link", "set", "ct-vb", "up"]):
            t.run(nsb + cmd)
        svc_b = subprocess.Popen(nsb + ["podman", "--tmpdir", os.path.join(root, "b-libpod"), "system", "service",
                                        "--time=0", env_b["DOCKER_HOST"]],
                                 stdout=open(os.path.join(root, "b-service.log"), "w"), stderr=subprocess.STDOUT, env=env_b)
        services.append(svc_b)
        t.wait_for("ctb's podman socket", lambda: os.path.exists(os.path.join(root, "b.sock")), 60)
        time.sleep(0.5)
        # CURVE keys with the CLI image (keys mounted writable at /keys), then each host gets the
        # other's public key.
        for name, h, comp, env in (("cta", a, compose_a, env_a), ("ctb", b, compose_b, env_b)):
            k = t.run(comp + ["run", "--rm", "-T", "-v", "%s:/keys" % h["keys"], "cli", "keygen", "--dir", "/keys",
                              "--name", name], env=env, check_rc=False, timeout=120)
            t.check("two.keygen[%s]" % name, k.returncode == 0 and os.path.exists(os.path.join(h["keys"], name + ".key")),
                    k.stdout[-500:] + k.stderr[-500:])
        for src, dst, name in ((a, b, "cta"), (b, a, "ctb")):
            shutil.copy(os.path.join(src["keys"], name + ".pub"), os.path.join(dst["keys"], name + ".pub"))
            os.chown(os.path.join(dst["keys"], name + ".pub"), 10001, 10001)
        up_a = t.run(compose_a + ["up", "-d", "redis", "redis-tls", "encoder", "sampler0", "transfer"], env=env_a,
                     check_rc=False, timeout=300)
        t.check("two.up[cta]", up_a.returncode == 0, up_a.stderr[-1500:])
        up_b = t.run(compose_b + ["up", "-d", "redis-tunnel", "decoder", "transfer"], env=env_b, check_rc=False, timeout=300)
        t.check("two.up[ctb]", up_b.returncode == 0, up_b.stderr[-1500:])
        for svc, port in (("encoder", 9501), ("sampler0", 9502), ("transfer", 9505)):
            try:
                t.wait_for("cta %s ready" % svc, lambda: t.http_status(port) == 200, 120)
                t.check("two.ready[cta/%s]" % svc, True)
            except TimeoutError as e:
                t.check("two.ready[cta/%s]" % svc, False, str(e))
        for svc, port in (("decoder", 9504), ("transfer", 9505)):
            try:  # ctb's ports answer on its veth address
                t.wait_for("ctb %s ready" % svc, lambda: t.http_status(port, host=B_IP) == 200, 120)
                t.check("two.ready[ctb/%s]" % svc, True)
            except TimeoutError as e:
                t.check("two.ready[ctb/%s]" % svc, False, str(e))
        t0 = time.monotonic()
        sub = t.run(compose_a + ["run", "--rm", "-T", "cli", "--config", "/etc/h3pipe/cluster.json", "run",
                                 "/var/lib/h3pipe/batch.jsonl"], env=env_a, check_rc=False, timeout=600)
        t.check("two.cli_run", sub.returncode == 0, "rc %d\n%s%s" % (sub.returncode, sub.stdout[-1500:], sub.stderr[-1500:]))
        print("two hosts, %d jobs: %.1fs" % (JOBS, time.monotonic() - t0), flush=True)
        t.check_outputs(b["data"], JOBS, "two.")
        for rec in sorted(glob.glob(os.path.join(b["data"], "outputs", "*", "*.pipeline.json"))):
            hosts = {st["stage"]: st["host"] for st in json.load(open(rec))["stages"]}
            t.check("two.sampled_on_cta_decoded_on_ctb[%s]" % os.path.basename(rec),
                    hosts.get("STAGE_SAMPLE") == "cta" and hosts.get("STAGE_DECODE") == "ctb", "%s" % hosts)
        # Redis's plain port is published on cta's loopback only: ctb gets it through TLS or not at all.
        probe = t.run(nsb + [sys.executable, "-c", "import socket; socket.create_connection(('%s', 6379), 3)" % A_IP],
                      check_rc=False)
        t.check("two.plain_redis_not_reachable_from_ctb", probe.returncode != 0, "connected to %s:6379" % A_IP)
    finally:
        if t.failed:
            for comp, env in ((compose_a, env_a), (compose_b, env_b)):
                logs = t.run(comp + ["logs", "--no-color", "--tail=25"], env=env, check_rc=False, timeout=60)
                print("\n".join(x for x in logs.stdout.splitlines() if "effective config" not in x)[-5000:], flush=True)
        t.compose_down(compose_b, "ctb", env_b, ["nsenter", "-t", str(holder.pid), "--net", "--mount", "--", "podman",
                                                 "--tmpdir", os.path.join(root, "b-libpod")])
        t.compose_down(compose_a, "cta", env_a)
        for s in services:
            s.terminate()
            s.wait(30)
        holder.kill()
        holder.wait()
        subprocess.run(["ip", "link", "del", "ct-va"], capture_output=True)
