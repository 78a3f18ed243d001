#!/usr/bin/python3
"""The images of docker/Dockerfile built and run for real with podman (docs/deploy.md, "Images").

    deploy_container.py REPO [H3PIPE_CLI] [--no-build] [--one-host] [--keep]

Opt-in: runs only with H3PIPE_CONTAINER_TESTS=1 (.ci/run sets it), because it first builds every
image with scripts/images.sh --standins (cold: the debootstrap base and the build stage; warm: all
cache hits, seconds), so the images it tests are those of this tree, never stale ones. Skips
(exit 77) only when not asked; asked, a missing tool (TOOLS: podman, runc, catatonit, netavark,
aardvark-dns, docker-compose, ...) or no root FAILS it, before anything is built.

It re-executes itself in a network namespace of its own (unshare --net), so the fixed ports that
compose.yaml publishes (6379, 9401-9505, 7700) collide with nothing else on the machine, and
serves podman's Docker-compatible API on a socket in its temp dir (DOCKER_HOST) for Debian's
docker-compose. Checks:
  images     each image's user (10001:10001), entrypoint and HEALTHCHECK as the Dockerfile says
  layers     no key, certificate, ACL file, cluster config, state, env or password file, nor the
             build context, in any layer of any image (podman image save, every layer's tar);
             nothing secret-looking in `podman history` or the image environment. The scanner
             is first shown to flag a planted key in a layer of its own.
  compose    one host: `docker-compose up` of Redis (stand-in), Prometheus (stand-in) and the
             sampler-host + decoder-host services; every /readyz 200 from the host; the image's
             own HEALTHCHECK run once per service (`podman healthcheck run`) reports healthy, and
             unhealthy for a container whose service does not listen; every service process runs
             as uid 10001; a batch submitted with the CLI image (`compose run cli run`) finishes
             with one valid MP4 per job (ffprobe: 256x256, 49 frames) and its receipt,
             owned by uid 10001 in the mounted data folder.
  README     with H3PIPE_CLI (the host's build/bin/h3pipe): the README's "one host with compose"
             block, line by line as written (docker/one-host.sh up, then `h3pipe run` of
             examples/batch.jsonl from the host against the published Redis), its MP4s checked the
             same way, and the time from the block's start to the first MP4 printed.
  two hosts  container_two_host.py: control + redis-tls + sampler-host on one, redis-tunnel +
             decoder-host on the other (two network namespaces joined by a veth pair), CURVE keys
             from the CLI image's keygen; a batch sampled on the first is decoded on the second
             (--one-host leaves it out).
  sentinel   with H3PIPE_CLI: compose.yaml + compose.sentinel.yaml (compose_sentinel_run.py): a
             primary, a replica and three Sentinels announcing an address of this namespace; the
             Sentinels name the primary, the replica is in sync, the host's CLI (config naming only
             the Sentinels) runs a batch to one MP4 per job, then the primary is killed -9 during
             a second batch: the replica is promoted and the batch still ends with one MP4 per job
             (--one-host leaves it out).
Not here: Grafana (no Debian package, no registry: its image cannot be had), GPUs (no NVIDIA
container toolkit).
"""
import glob
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

SKIP = 77
# The compose services started and their readiness ports (h3pipe-api: its own port, docs/api.md).
SERVICES = {"encoder": 9501, "sampler0": 9502, "decoder": 9504, "transfer": 9505, "api": 8088}
IMAGES = ["encoder", "sampler", "decoder", "transfer", "api", "cli", "stunnel"]
JOBS = 3

passed, failed = [], []


def check(name, ok, detail=""):
    (passed if ok else failed).append(name)
    print("%s %s%s" % ("PASS" if ok else "FAIL", name, (": " + detail) if detail and not ok else ""), flush=True)
    return ok


def skip(reason):
    print("SKIP deploy_container: " + reason, flush=True)
    sys.exit(SKIP)


def run(cmd, timeout=120, check_rc=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if check_rc and p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
    return p


def wait_for(what, pred, deadline_s, every=0.5):
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001  the condition is not met yet; keep the reason
            last = e
        time.sleep(every)
    raise TimeoutError("%s not within %ss%s" % (what, deadline_s, (": %s" % last) if last else ""))


# --- layers ---------------------------------------------------------------------------------------
# Public CA certificates are .pem files by design (ca-certificates); everything else that looks
# like key material, a site's config or state is a leak.
CA_DIRS = ("etc/ssl/certs/", "usr/share/ca-certificates/", "usr/lib/ssl/certs/")
LEAK_NAMES = re.compile(r"(\.key|\.pem|\.crt|\.p12|\.password|\.env|users\.acl|cluster[^/]*\.json|"
                        r"id_rsa|id_ed25519|id_ecdsa|_key|\.h3latent)$")
LEAK_DIRS = re.compile(r"(^|/)(\.state|\.git|secrets|keys)/|^(src|deploy|build)/|^etc/ssl/private/|^etc/h3pipe/")


def leaks_in_layer(fileobj):
    out = []
    with tarfile.open(fileobj=fileobj, mode="r|*") as t:
        for m in t:
            name = m.name.lstrip("./")
            if m.isdir() or os.path.basename(name).startswith(".wh."):
                continue
            if name.startswith(CA_DIRS) or (m.issym() and m.linkname.lstrip("/").startswith(CA_DIRS)):
                continue  # the public CA bundle (usr/lib/ssl/cert.pem links to it)
            if LEAK_NAMES.search(name) or LEAK_DIRS.search(name):
                out.append(name)
    return out


def scan_archive(path):
    """Every layer of a docker-archive (podman image save) -> {layer: [leaked paths]}."""
    found = {}
    with tarfile.open(path) as outer:
        manifest = json.load(outer.extractfile("manifest.json"))
        layers = sorted({layer for image in manifest for layer in image["Layers"]})
        for layer in layers:
            leaks = leaks_in_layer(outer.extractfile(layer))
            if leaks:
                found[layer] = leaks
    return found, len(layers)


def check_scanner(tmp):
    """The scanner flags a planted key and a cluster config, and passes a CA bundle."""
    src = os.path.join(tmp, "plant")
    for rel in ("etc/h3pipe/keys/node1.key", "etc/h3pipe/cluster.json", "etc/ssl/certs/ca.pem"):
        os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
        open(os.path.join(src, rel), "w").write("x")
    layer = os.path.join(tmp, "plant.tar")
    with tarfile.open(layer, "w") as t:
        t.add(src, arcname=".")
    got = sorted(leaks_in_layer(open(layer, "rb")))
    check("layers.scanner_flags_planted_files", got == ["etc/h3pipe/cluster.json", "etc/h3pipe/keys/node1.key"],
          "flagged %s" % got)


def check_layers(tmp, refs):
    archive = os.path.join(tmp, "images.tar")
    run(["podman", "image", "save", "--multi-image-archive", "--format", "docker-archive", "-o", archive] + refs,
        timeout=600)
    found, n = scan_archive(archive)
    os.unlink(archive)
    check("layers.no_secret_or_site_file", not found and n > 0,
          "; ".join("%s: %s" % (k, v[:10]) for k, v in found.items()) or "no layers")
    secretish = re.compile(r"password|secret|token|BEGIN [A-Z ]*PRIVATE", re.I)
    for ref in refs:
        hist = run(["podman", "history", "--no-trunc", "--format", "{{.CreatedBy}}", ref]).stdout
        bad = [line for line in hist.splitlines() if secretish.search(line)]
        env = json.loads(run(["podman", "image", "inspect", ref]).stdout)[0]["Config"].get("Env") or []
        bad += [e for e in env if secretish.search(e.split("=", 1)[0])]
        check("layers.history_env_clean[%s]" % ref, not bad, "%s" % bad[:5])


def check_image_configs(refs):
    for name, ref in refs.items():
        info = json.loads(run(["podman", "image", "inspect", ref]).stdout)[0]
        cfg = info["Config"]
        # podman shows a docker-format image's HEALTHCHECK beside Config, not in it.
        hc = (info.get("Healthcheck") or cfg.get("Healthcheck") or {}).get("Test") or []
        if name == "stunnel":
            check("image.user[stunnel]", cfg.get("User") == "10001:10001", cfg.get("User"))
            continue
        check("image.user[%s]" % name, cfg.get("User") == "10001:10001", "User=%r" % cfg.get("User"))
        want_ep = "h3pipe" if name == "cli" else "h3pipe-" + name
        check("image.entrypoint[%s]" % name, cfg.get("Entrypoint") == [want_ep], "%s" % cfg.get("Entrypoint"))
        if name == "cli":
            check("image.healthcheck[cli]", hc in ([], ["NONE"]), "%s" % hc)
        else:
            check("image.healthcheck[%s]" % name, hc == ["CMD", "h3pipe-healthcheck"], "%s" % hc)


# --- compose ------------------------------------------------------------------------------------
def http_status(port, path="/readyz", host="127.0.0.1"):
    try:
        with urllib.request.urlopen("http://%s:%d%s" % (host, port, path), timeout=3) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def start_podman_service(tmp, env):
    sock = os.path.join(tmp, "podman.sock")
    log = open(os.path.join(tmp, "podman-service.log"), "w")
    proc = subprocess.Popen(["podman", "system", "service", "--time=0", "unix://" + sock],
                            stdout=log, stderr=subprocess.STDOUT, env=env)

    def ping():
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(sock)
        s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
        return s.recv(64).startswith(b"HTTP/1.") and s.close() is None

    wait_for("podman API socket", ping, 60)
    return proc, "unix://" + sock


def write_site(tmp, version):
    """Config, secrets, keys and data dirs for host ct1, as docs/deploy.md tells an operator."""
    site = {k: os.path.join(tmp, k) for k in ("secrets", "keys", "data")}
    for d in site.values():
        os.makedirs(d)
    for d in ("keys", "data"):
        os.chown(site[d], 10001, 10001)
        os.chmod(site[d], 0o750)
    for user in ("encoder", "sampler", "decoder", "transfer", "operator", "admin"):
        p = os.path.join(site["secrets"], "redis-%s.password" % user)
        open(p, "w").write(hashlib.sha256(os.urandom(16)).hexdigest() + "\n")
        os.chown(p, 10001, 10001)
        os.chmod(p, 0o400)
    open(os.path.join(site["secrets"], "grafana_admin_password"), "w").write("unused\n")
    cfg = {
        "name": "ct", "state_dir": "/var/lib/h3pipe/state", "artifact_root": "/var/lib/h3pipe/artifacts",
        "output_root": "/var/lib/h3pipe/outputs", "dispatch": "completion_time",
        "redis": {"host": "127.0.0.1", "port": 6379, "user": "h3pipe-operator",
                  "password_file": "/run/secrets/redis-operator.password", "embedded": False},
        "queue": {"lease_ms": 5000, "renew_ms": 1000, "sweep_ms": 1000, "max_deliveries": 3, "block_ms": 200},
        "transfer": {"curve": False},
        "stages": {s: {"runtime": {"name": "builtin", "settings": {}}} for s in ("encode", "sample", "decode")},
        "classes": [{"name": "demo", "width": 256, "height": 256, "frames": 49, "steps": 6}],
        "hosts": [{"name": "ct1", "address": "127.0.0.1", "bind": "0.0.0.0", "transfer_port": 7700}],
        "pools": [
            {"name": "encoder", "host": "ct1", "stage": "encode",
             "profiles": {"default": {"kind": "fixed", "seconds": 0.05}}},
            {"name": "sampler0", "host": "ct1", "stage": "sample", "gpus": [0],
             "profiles": {"default": {"kind": "fixed", "seconds": 0.4}}},
            {"name": "decoder", "host": "ct1", "stage": "decode",
             "profiles": {"default": {"kind": "fixed", "seconds": 0.1}}}],
    }
    conf = os.path.join(tmp, "cluster.json")
    json.dump(cfg, open(conf, "w"), indent=1)
    env_file = os.path.join(tmp, "ct1.env")
    open(env_file, "w").write("\n".join([
        "COMPOSE_PROFILES=control,sampler-host,decoder-host,tools",
        "H3PIPE_HOST=ct1", "H3PIPE_CONFIG_FILE=" + conf, "H3PIPE_KEYS_DIR=" + site["keys"],
        "H3PIPE_DATA_DIR=" + site["data"], "H3PIPE_SECRETS_DIR=" + site["secrets"],
        "H3PIPE_GRAFANA_PASSWORD_FILE=" + os.path.join(site["secrets"], "grafana_admin_password"),
        "H3PIPE_ENCODER_POOL=encoder", "H3PIPE_SAMPLER0_POOL=sampler0", "H3PIPE_DECODER_POOL=decoder",
        "H3PIPE_REDIS_ADDRESS=redis:6379", "H3PIPE_VERSION=" + version,
        "H3PIPE_REDIS_IMAGE=localhost/h3pipe-standin/redis:latest",
        "H3PIPE_PROMETHEUS_IMAGE=localhost/h3pipe-standin/prometheus:latest", ""]))
    batch = os.path.join(site["data"], "batch.jsonl")
    with open(batch, "w") as f:
        for i in range(JOBS):
            f.write(json.dumps({"jobId": "ct-%d" % i, "prompt": "container test %d" % i, "width": 256,
                                "height": 256, "frames": 49, "fps": 24, "steps": 6, "seed": i + 1}) + "\n")
    os.chown(batch, 10001, 10001)
    return site, env_file


def process_uids(pid):
    """uid of pid and of all its descendants (the container's processes, seen from the host)."""
    uids, todo = {}, [pid]
    while todo:
        p = todo.pop()
        try:
            status = open("/proc/%d/status" % p).read()
            uids[p] = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))
            for task in os.listdir("/proc/%d/task" % p):
                todo += [int(c) for c in open("/proc/%d/task/%s/children" % (p, task)).read().split()]
        except (OSError, AttributeError):
            continue
    return uids


def check_compose(repo, tmp, version, env):
    site, env_file = write_site(tmp, version)
    compose = ["docker-compose", "--project-name", "ct1", "--project-directory", repo,
               "-f", os.path.join(repo, "compose.yaml"), "--env-file", env_file]
    services = ["redis", "prometheus"] + list(SERVICES)
    try:
        up = run(compose + ["up", "-d", "--no-build"] + services, timeout=300, check_rc=False, env=env)
        if not check("compose.up", up.returncode == 0, (up.stdout + up.stderr)[-2000:]):
            return
        ids = {s: run(compose + ["ps", "-q", s], env=env).stdout.strip() for s in services}
        for svc, port in SERVICES.items():
            try:
                wait_for("%s /readyz" % svc, lambda: http_status(port) == 200, 120)
                check("compose.ready[%s]" % svc, True)
            except TimeoutError as e:
                logs = run(compose + ["logs", "--tail=20", svc], env=env, check_rc=False).stdout
                check("compose.ready[%s]" % svc, False, "%s\n%s" % (e, logs[-1500:]))
        # The console's bundle is in the api image (COPY --from=ui) and served under /ui/ with
        # nothing fetched from outside: the shell for a deep link, and its script.
        check("compose.ui[api]", http_status(SERVICES["api"], "/ui/runs/x") == 200
              and http_status(SERVICES["api"], "/ui/app.js") == 200,
              "/ui/runs/x %s, /ui/app.js %s" % (http_status(SERVICES["api"], "/ui/runs/x"),
                                                http_status(SERVICES["api"], "/ui/app.js")))
        for svc in SERVICES:
            hc = run(["podman", "healthcheck", "run", ids[svc]], check_rc=False, env=env)
            check("healthcheck.healthy[%s]" % svc, hc.returncode == 0 and "unhealthy" not in hc.stdout,
                  "rc %d: %s%s" % (hc.returncode, hc.stdout, hc.stderr))
            pid = int(run(["podman", "inspect", "--format", "{{.State.Pid}}", ids[svc]], env=env).stdout)
            uids = process_uids(pid)
            check("uid.10001[%s]" % svc, uids and set(uids.values()) == {10001}, "%s" % uids)
        # The check must also fail: the transfer image with nothing listening on its port.
        idle = run(["podman", "run", "-d", "--rm", "--entrypoint", "sleep", "h3pipe/transfer:" + version, "120"],
                   env=env).stdout.strip()
        try:
            hc = run(["podman", "healthcheck", "run", idle], check_rc=False, env=env)
            check("healthcheck.unhealthy_without_listener", hc.returncode != 0, "rc %d: %s" % (hc.returncode, hc.stdout))
        finally:
            run(["podman", "rm", "-f", "-t", "0", idle], check_rc=False, env=env)
        # A batch through the CLI image, as docs/deploy.md does it.
        t0 = time.monotonic()
        sub = run(compose + ["run", "--rm", "-T", "cli", "--config", "/etc/h3pipe/cluster.json",
                             "run", "/var/lib/h3pipe/batch.jsonl"], timeout=600, check_rc=False, env=env)
        check("compose.cli_run", sub.returncode == 0, "rc %d\n%s%s" % (sub.returncode, sub.stdout[-2000:], sub.stderr[-2000:]))
        print("batch of %d jobs: %.1fs" % (JOBS, time.monotonic() - t0), flush=True)
        check_outputs(site["data"])
    finally:
        if failed:
            logs = run(compose + ["logs", "--no-color", "--tail=40", "redis"] + list(SERVICES), env=env,
                       check_rc=False, timeout=60)
            print("\n".join(l for l in logs.stdout.splitlines() if "effective config" not in l)[-8000:], flush=True)
        compose_down(compose, "ct1", env)


def compose_down(compose, project, env, podman=("podman",)):
    """`compose down`, then whatever it left: with network_mode service:redis (redis-tls) compose
    1.29 can stop Redis and fail to remove it while the sidecar still holds its namespace."""
    run(compose + ["down", "-v", "--remove-orphans", "-t", "5"], env=env, check_rc=False, timeout=180)
    label = "label=com.docker.compose.project=" + project
    podman = list(podman)
    left = run(podman + ["ps", "-aq", "--filter", label], env=env, check_rc=False).stdout.split()
    if left:
        print("compose down left %d container(s) of %s: removing them" % (len(left), project), flush=True)
        run(podman + ["rm", "-f", "-t", "0"] + left, env=env, check_rc=False, timeout=120)
    for kind in ("network", "volume"):
        names = run(podman + [kind, "ls", "-q", "--filter", label], env=env, check_rc=False).stdout.split()
        if names:
            run(podman + [kind, "rm", "-f"] + names, env=env, check_rc=False, timeout=60)


def check_outputs(data, jobs=JOBS, prefix=""):
    mp4s = sorted(glob.glob(os.path.join(data, "outputs", "*", "*.mp4")))
    check(prefix + "outputs.one_mp4_per_job", len(mp4s) == jobs, "%s" % mp4s)
    for mp4 in mp4s:
        job = os.path.basename(mp4)[:-4]
        st = os.stat(mp4)
        check(prefix + "outputs.owner_10001[%s]" % job, st.st_uid == 10001 and st.st_gid == 10001,
              "uid %d gid %d" % (st.st_uid, st.st_gid))
        digest = hashlib.sha256(open(mp4, "rb").read()).hexdigest()
        try:
            receipt = json.load(open(mp4[:-4] + ".pipeline.json"))
        except (OSError, ValueError) as e:
            check(prefix + "outputs.receipt[%s]" % job, False, str(e))
            continue
        check(prefix + "outputs.receipt[%s]" % job, receipt.get("mp4Sha256") == digest,
              "receipt %s, file %s" % (receipt.get("mp4Sha256"), digest))
        p = run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                 "stream=codec_name,width,height,nb_read_frames", "-of", "json", mp4], check_rc=False)
        s = (json.loads(p.stdout or "{}").get("streams") or [{}])[0]
        check(prefix + "outputs.valid_mp4[%s]" % job, p.returncode == 0 and s.get("width") == 256 and
              s.get("height") == 256 and s.get("nb_read_frames") == "49", "%s %s" % (s, p.stderr[-300:]))


# --- the README's "one host with compose", run as written ------------------------------------------
README_MARK = "<!-- one-host: "


def readme_one_host_lines(repo):
    """The indented command block after the README's one-host marker."""
    lines, inside = [], False
    for line in open(os.path.join(repo, "README.md")):
        if line.startswith(README_MARK):
            inside = True
            continue
        if inside:
            if line.startswith("    "):
                lines.append(line[4:].rstrip("\n"))
            elif lines:
                break
    return lines


def check_readme_one_host(repo, tmp, cli, env):
    """Every line of the block, in order, with the host CLI's path and a folder of our own for
    .state/one-host; the time to the first MP4 and its outputs checked as compose.cli_run's."""
    lines = readme_one_host_lines(repo)
    if not check("readme.one_host_block", len(lines) >= 3 and any("one-host.sh up" in l for l in lines),
                 "README.md has no command block after %r" % README_MARK):
        return
    site = os.path.join(tmp, "one-host")
    script = "\n".join(l.replace(".state/one-host", site).replace("build/bin/h3pipe", cli) for l in lines)
    renv = dict(env, H3PIPE_ONE_HOST_DIR=site,
                H3PIPE_REDIS_IMAGE="localhost/h3pipe-standin/redis:latest",
                H3PIPE_PROMETHEUS_IMAGE="localhost/h3pipe-standin/prometheus:latest")
    t0 = time.monotonic()
    first = None
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=repo, env=renv,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = []
        import threading
        reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
        reader.start()
        end = t0 + 900
        while proc.poll() is None and time.monotonic() < end:
            if first is None and glob.glob(os.path.join(site, "data", "outputs", "*", "*.mp4")):
                first = time.monotonic() - t0
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        reader.join(10)
        total = time.monotonic() - t0
        check("readme.one_host_ran", proc.returncode == 0, "rc %s\n%s" % (proc.returncode, "".join(out)[-3000:]))
        print("README one host: first MP4 after %s, block done in %.1fs\n%s" % (
            "%.1fs" % first if first is not None else "never", total, "".join(out)[-1500:]), flush=True)
        check_outputs(os.path.join(site, "data"), jobs=sum(1 for _ in open(os.path.join(repo, "examples", "batch.jsonl"))),
                      prefix="readme.")
    finally:
        run([os.path.join(repo, "docker", "one-host.sh"), "down", site], env=renv, check_rc=False, timeout=180)
        compose_down(["docker-compose", "--project-name", "h3pipe-one-host", "--project-directory", repo,
                      "-f", os.path.join(repo, "compose.yaml"), "--env-file", os.path.join(site, "one-host.env")],
                     "h3pipe-one-host", env)


# --- tools ----------------------------------------------------------------------------------------
# What the test and scripts/images.sh use, and the Debian package with it (scripts/setup.sh's
# container_packages and test_packages).  catatonit: compose.yaml's `init: true`; aardvark-dns:
# netavark's DNS, how the services find `redis` by name.
TOOLS = (("podman", "podman"), ("docker-compose", "docker-compose"), ("runc", "runc"),
         ("/usr/libexec/podman/catatonit", "catatonit"), ("/usr/lib/podman/netavark", "netavark"),
         ("/usr/lib/podman/aardvark-dns", "aardvark-dns"), ("iptables", "iptables"),
         ("debootstrap", "debootstrap"), ("unshare", "util-linux"), ("nsenter", "util-linux"),
         ("ip", "iproute2"), ("ffprobe", "ffmpeg"), ("openssl", "openssl"))


def check_tools():
    missing = ["%s (apt-get install %s)" % (t, p) for t, p in TOOLS
               if not (os.access(t, os.X_OK) if t.startswith("/") else shutil.which(t))]
    check("tools.installed", not missing, "missing: " + ", ".join(missing))
    check("tools.root", os.geteuid() == 0,
          "needs root (a network namespace of its own, rootful podman, chown to uid 10001)")
    return not failed


# --- main ---------------------------------------------------------------------------------------
SENTINEL_ANNOUNCE = "10.203.0.1"  # an address of this network namespace (a veth end; no dummy module)


def check_sentinel_overlay(repo, cli, env):
    """compose.yaml + compose.sentinel.yaml for real (issue #23; compose_sentinel_run.py): a primary,
    a replica and three Sentinels announcing an address of this namespace that the containers reach
    through the published ports; a batch, then a batch during which the primary is killed -9."""
    for cmd in (["ip", "link", "add", "h3sent0", "type", "veth", "peer", "name", "h3sent1"],
                ["ip", "addr", "add", SENTINEL_ANNOUNCE + "/32", "dev", "h3sent0"],
                ["ip", "link", "set", "h3sent0", "up"], ["ip", "link", "set", "h3sent1", "up"]):
        run(cmd)
    p = run([sys.executable, os.path.join(repo, "tests", "deploy", "compose_sentinel_run.py"), "--jobs", "4",
             "--announce", SENTINEL_ANNOUNCE, "--cli", cli], timeout=900, check_rc=False, env=env)
    print(p.stdout[-4000:], flush=True)
    last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else "{}"
    try:
        res = json.loads(last)
    except ValueError:
        res = {}
    failed_checks = [k for k, v in res.get("checks", {}).items() if not v]
    check("compose.sentinel", p.returncode == 0 and res.get("ok") is True,
          "rc %d, failed %s, %s" % (p.returncode, failed_checks, p.stderr[-2000:]))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repo = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    cli = os.path.abspath(args[1]) if len(args) > 1 else ""  # the host's h3pipe (the README's build/bin/h3pipe)
    if os.environ.get("H3PIPE_CONTAINER_TESTS") != "1":
        skip("opt-in (set H3PIPE_CONTAINER_TESTS=1; .ci/run does): it builds every image with "
             "scripts/images.sh first")
    # Asked for, so everything it needs must be there: a missing tool fails the run (scripts/setup.sh
    # installs them all), checked before anything is built.
    if not check_tools():
        print("0 passed, %d failed" % len(failed), flush=True)
        sys.exit(1)
    version = re.search(r"project\(h3pipe VERSION ([0-9.]+)", open(os.path.join(repo, "CMakeLists.txt")).read()).group(1)
    if os.environ.get("H3PIPE_CT_NETNS") != "1":
        # Build first, on the machine's network (a cold build installs Debian packages), then
        # go on in a network namespace of our own.
        if "--no-build" not in sys.argv:
            t0 = time.monotonic()
            b = subprocess.run([os.path.join(repo, "scripts", "images.sh"), "--standins"], cwd=repo,
                               stdout=subprocess.PIPE, text=True, timeout=3600)
            print(b.stdout, flush=True)
            if b.returncode != 0:
                print("FAIL images.build: scripts/images.sh exited %d\n0 passed, 1 failed" % b.returncode)
                sys.exit(1)
            print("images built in %.0fs" % (time.monotonic() - t0), flush=True)
        env = dict(os.environ, H3PIPE_CT_NETNS="1")
        os.execvpe("unshare", ["unshare", "--net", "--", sys.executable] + sys.argv, env)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)

    tmp = tempfile.mkdtemp(prefix="h3pipe-ct.")
    os.chmod(tmp, 0o755)
    conf = os.path.join(tmp, "containers.conf")
    run([os.path.join(repo, "scripts", "images.sh"), "--containers-conf", conf])
    env = dict(os.environ, CONTAINERS_CONF=conf)
    refs = {n: "localhost/h3pipe/%s:%s" % (n, version) for n in IMAGES}
    missing = [r for r in refs.values() if run(["podman", "image", "exists", r], check_rc=False, env=env).returncode]
    if not check("images.present", not missing, "%s (run scripts/images.sh --standins)" % missing):
        print("%d passed, %d failed" % (len(passed), len(failed)), flush=True)
        sys.exit(1)
    service = None
    try:
        check_image_configs(refs)
        check_scanner(tmp)
        check_layers(tmp, list(refs.values()))
        service, host = start_podman_service(tmp, env)
        compose_env = dict(env, DOCKER_HOST=host, COMPOSE_INTERACTIVE_NO_CLI="1")
        check_compose(repo, tmp, version, compose_env)
        if not failed and cli:
            check_readme_one_host(repo, tmp, cli, compose_env)
        if not failed and "--one-host" not in sys.argv:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import container_two_host
            container_two_host.check_two_hosts(sys.modules[__name__], repo, tmp, version, compose_env)
        if not failed and cli and "--one-host" not in sys.argv:
            check_sentinel_overlay(repo, cli, env)
    except Exception as e:  # noqa: BLE001  report it as a failure with what happened
        check("deploy_container.ran_to_the_end", False, "%s: %s" % (type(e).__name__, e))
    finally:
        if service:
            service.terminate()
            service.wait(30)
        if "--keep" not in sys.argv:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept " + tmp)
    print("%d passed, %d failed" % (len(passed), len(failed)), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
