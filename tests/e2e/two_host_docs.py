#!/usr/bin/python3
"""docs/deploy.md's native two-host block, run line by line as written (issue #34 item 10).

The block after the marker `<!-- two-host-native: ... -->` in docs/deploy.md ("Two hosts, native
(the seeds' flow)") is every command the seeds' operator types, from the host map to the MP4s.
This test runs it on two "machines" made of chaos.py's two network namespaces (netns.py): node-292
(the sampler host) in A and node-241 (the decode host) in B, each with a real sshd (Debian's
OpenSSH, key auth, known host keys) and a home of its own: each sshd runs in a mount namespace of
its own where /root is that host's folder, so what one host writes (its .state, its secrets, its
keys) the other cannot see, and what the block copies with scp really crosses.  The operator works
in A with a home of its own too (~/.ssh/config naming node292 and node241, ~/.ssh/known_hosts),
from a fresh folder.

The block runs with these variables in its environment, as the doc says:
  H3       the CLI (BUILD/bin/h3pipe; the hosts run the same path)
  SRC      the repository (for configs/hostmaps/seeds_two_host.json)
  NODE292  node-292's address (A's veth address), NODE241 node-241's (B's)
Each line runs in bash (`set -a -o pipefail`; variables and the working folder carry over from
one line to the next); a line ending in `\\` continues on the next; `#` lines are comments.  One
comment is an event, not a command: the line with "goes down mid-run" is where the test, once
node-241 holds at least one MP4 and a job in progress (its latent there, its MP4 not yet), kills -9
every process in B but its sshd (the decode host's supervisor, services and whatever else its
stack runs), as a crash would.

Passes when every line exits 0 and:
  * every job of the block's batch has one MP4 on node-241 that ffprobe reads, with its receipt
    (<job>.pipeline.json, mp4Sha256 = the file's SHA-256) and sidecar; no other MP4, no .part;
  * node-241 was killed with some but not all of the jobs' MP4s written, holding a job in progress;
  * `report --json` on node-292 and on node-241 give the same object (every job's receipt),
    `resume` the same answer (every job done, nothing re-enqueued), `profile learn --json` the same
    profiles, in the seeds' seconds (within 25 % of the config's: time_scale divided out); the
    files the block writes: report.<host>.json, resume.<host>.txt, profile.<host>.json;
  * nothing done twice: no job hash's wrote:<stage> or done:transfer above 1, no pending entry
    in any stage stream, an empty dead-letter stream (read from the shared Redis as redis-admin,
    with the password found on node-241).
Each line's command, exit status, time and output are printed; on a failure, which line failed
and why.

Usage: two_host_docs.py --bin BUILD/bin [--src REPO] [--doc FILE] [--keep]
Exit status: 0 pass, 1 fail, 2 set-up error, 77 only when not root or no network namespaces
(the reason is printed).
"""
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "chaos"))
from netns import SKIP, log, netns_main  # noqa: E402
from chaos import Resp, s  # noqa: E402

SSHD = "/usr/sbin/sshd"
MARKER = "<!-- two-host-native: "
CRASH_WORDS = "goes down mid-run"
HOSTS = {"node-292": "node292", "node-241": "node241"}  # name -> ssh alias (the host map's)


def block_lines(doc):
    """The indented lines after the marker, continuations joined; comments kept (for the crash)."""
    raw, inside = [], False
    for line in open(doc):
        if line.startswith(MARKER):
            inside = True
            continue
        if inside:
            if line.startswith("    "):
                raw.append(line[4:].rstrip("\n"))
            elif line.strip() == "" and raw:
                raw.append("")
            elif raw:
                break
    lines, cur = [], ""
    for l in raw:
        if cur:
            cur += "\n" + l
        else:
            cur = l
        if cur.endswith("\\"):
            continue
        if cur.strip():
            lines.append(cur.strip())
        cur = ""
    if cur.strip():
        lines.append(cur.strip())
    return lines


class Site:
    def __init__(self, a):
        self.a = a
        self.bin = os.path.abspath(a.bin)
        self.h3 = os.path.join(self.bin, "h3pipe")
        self.src = os.path.abspath(a.src)
        self.work = tempfile.mkdtemp(prefix="h3twohost-", dir=a.workdir)
        os.chmod(self.work, 0o755)
        self.home = {h: os.path.join(self.work, "home-" + h) for h in HOSTS}
        self.ops_home = os.path.join(self.work, "home-operator")
        self.ops_dir = os.path.join(self.ops_home, "seeds")
        self.ip = {"node-292": a.ip_a, "node-241": a.ip_b}
        self.sshd = {}
        self.envfile = os.path.join(self.work, "block.env")
        self.cwdfile = os.path.join(self.work, "block.cwd")

    # -- the machines
    def start_sshd(self, host, keydir, known):
        key = os.path.join(keydir, "hostkey-" + host)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        conf = os.path.join(keydir, "sshd-%s.conf" % host)
        with open(conf, "w") as f:
            f.write("\n".join([
                "ListenAddress %s:22" % self.ip[host], "HostKey " + key,
                "AuthorizedKeysFile " + os.path.join(keydir, "authorized_keys"),
                "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                "Subsystem sftp internal-sftp",  # scp speaks SFTP (OpenSSH 9)
                "PidFile " + os.path.join(keydir, "sshd-%s.pid" % host), ""]))
        # A mount namespace of its own, where /root is this host's folder (its home, its .state),
        # and a PID namespace of its own with its /proc: on one machine the two hosts' stacks
        # would see each other's processes (the same /root/.state in their argv), which two
        # machines never do.  sshd is that namespace's init (it reaps what is orphaned there).
        inner = "mount --bind %s /root && exec %s -D -e -f %s" % (self.home[host], SSHD, conf)
        argv = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork", "--mount-proc",
                "sh", "-c", inner]
        if host == "node-241":
            argv = ["ip", "netns", "exec", self.a.ns_b] + argv
        self.sshd[host] = subprocess.Popen(argv, stderr=open(os.path.join(keydir, "sshd-%s.log" % host), "wb"),
                                           start_new_session=True)
        with open(key + ".pub") as pub:
            known.append("%s %s" % (self.ip[host], " ".join(pub.read().split()[:2])))

    def setup(self):
        for d in list(self.home.values()) + [self.ops_home]:
            os.makedirs(d, mode=0o700)
        keydir = os.path.join(self.work, "sshd")
        os.makedirs(keydir, mode=0o700)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        dot = os.path.join(self.ops_home, ".ssh")
        os.makedirs(dot, mode=0o700)
        client = os.path.join(dot, "id_ed25519")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", client], check=True)
        shutil.copy(client + ".pub", os.path.join(keydir, "authorized_keys"))
        known = []
        for host in HOSTS:
            self.start_sshd(host, keydir, known)
        with open(os.path.join(dot, "known_hosts"), "w") as f:
            f.write("\n".join(known) + "\n")
        # The operator's ~/.ssh/config, as the seeds' operator has one: the host map's aliases.
        with open(os.path.join(dot, "config"), "w") as f:
            for host, alias in HOSTS.items():
                f.write("Host %s\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n"
                        "  IdentitiesOnly yes\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
                        % (alias, self.ip[host]))
        # This process (already in a mount namespace of its own: `ip netns exec` made it) is the
        # operator's machine: its /root is the operator's home.
        subprocess.run(["mount", "--bind", self.ops_home, "/root"], check=True)
        os.makedirs(self.ops_dir)
        for host, alias in HOSTS.items():
            deadline = time.time() + 10
            while subprocess.run(["ssh", "-o", "BatchMode=yes", alias, "true"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL).returncode != 0:
                if time.time() > deadline:
                    logs = open(os.path.join(keydir, "sshd-%s.log" % host), errors="replace").read()
                    if "account is locked" in logs:  # this machine's root, not h3pipe: a failure all the same
                        raise RuntimeError("sshd refuses root here: its account is locked (a '!' password in "
                                           "/etc/shadow); `usermod -p '*' root` allows key logins")
                    raise RuntimeError("sshd of %s did not answer within 10 s: %s" % (host, logs[-800:]))
                time.sleep(0.05)
        # The host's home really is its own.
        r = subprocess.run(["ssh", "node241", "pwd; ls -A"], capture_output=True, text=True)
        if r.stdout.split("\n")[0] != "/root" or ".ssh" in r.stdout:
            raise RuntimeError("node241's home is not its own folder: %r" % r.stdout)
        with open(self.envfile, "w") as f:
            for k, v in (("H3", self.h3), ("SRC", self.src), ("NODE292", self.ip["node-292"]),
                         ("NODE241", self.ip["node-241"]), ("HOME", "/root")):
                f.write("export %s=%s\n" % (k, shquote(v)))
        with open(self.cwdfile, "w") as f:
            f.write(self.ops_dir)

    # -- the block
    def run_line(self, line, timeout):
        script = ('set -a; . %s >/dev/null 2>&1; cd "$(cat %s)" || exit 97; set -o pipefail\n%s\n'
                  'rc=$?; export -p > %s.new; mv %s.new %s; pwd > %s; exit $rc\n'
                  % (self.envfile, self.cwdfile, line, self.envfile, self.envfile, self.envfile, self.cwdfile))
        t0 = time.monotonic()
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "HOME": "/root",
               "LANG": "C.UTF-8"}
        p = subprocess.Popen(["bash", "-c", script], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=timeout)
            return p.returncode, out, time.monotonic() - t0
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the line's ssh and scp too, not only its bash
            out, _ = p.communicate()
            return 124, (out or "") + "\n(killed after %ds)" % timeout, time.monotonic() - t0

    def var(self, name):
        """A variable the block set (read back from its environment file)."""
        r = subprocess.run(["bash", "-c", ". %s >/dev/null 2>&1; printf %%s \"${%s:-}\"" % (self.envfile, name)],
                           capture_output=True, text=True)
        return r.stdout

    def outputs(self, run):
        return sorted(glob.glob(os.path.join(self.home["node-241"], ".state", "outputs", run, "*.mp4")))

    def ns_b_pids(self):
        r = subprocess.run(["ip", "netns", "pids", self.a.ns_b], capture_output=True, text=True)
        return [int(x) for x in r.stdout.split()]

    def in_progress(self, run):
        """Jobs node-241 holds unfinished: their latent arrived (or is arriving), no MP4 yet."""
        held = {os.path.basename(d) for d in glob.glob(os.path.join(self.home["node-241"], ".state", "artifacts", run, "*"))}
        return sorted(held - {os.path.basename(m)[:-4] for m in self.outputs(run)})

    def crash_node241(self, jobs, deadline_s=120):
        """Once node-241 holds >= 1 MP4 and a job in progress (its latent there, no MP4 yet):
        kill -9 every process in B but its sshd.  Returns (ok, what)."""
        run = self.var("RUN")
        if not run:
            return False, "no RUN variable set by the block before the crash point"
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            n = len(self.outputs(run))
            if n >= jobs:
                return False, "the run finished (%d MP4s) before node-241 could be killed mid-run" % n
            busy = self.in_progress(run)
            if n >= 1 and busy:
                break
            time.sleep(0.005)
        else:
            return False, "no MP4 and job in progress on node-241 within %ds of the crash point" % deadline_s
        # The sshd: the child of the unshare wrapper (the PID namespace's init); its sessions and
        # whatever the stack runs are below it or reparented to it.
        wrapper = self.sshd["node-241"].pid
        keep = {wrapper} | {p for p in self.ns_b_pids() if ppid(p) == wrapper}
        killed = []
        for pid in self.ns_b_pids():
            if pid in keep:
                continue
            try:
                name = open("/proc/%d/comm" % pid).read().strip()
                os.kill(pid, signal.SIGKILL)
                killed.append("%s(%d)" % (name, pid))
            except (OSError, ProcessLookupError):
                pass
        done = len(self.outputs(run))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and [p for p in self.ns_b_pids() if p not in keep]:
            time.sleep(0.02)
        left = [p for p in self.ns_b_pids() if p not in keep]
        what = "killed -9 on node-241 with %d of %d MP4s written and %s in progress there: %s" % (
            done, jobs, ", ".join(busy), " ".join(killed) or "nothing")
        if left:
            return False, what + "; still alive: %s" % left
        return bool(killed) and done < jobs, what

    def report_stacks(self):
        """Each host's processes as its stack.json records them (restarts, last exit): printed,
        since a restart nobody asked for is what explains a leftover."""
        for host in HOSTS:
            try:
                st = json.load(open(os.path.join(self.home[host], ".state", "stack.json")))
            except (OSError, ValueError) as e:
                log("%s: no stack.json (%s)" % (host, e))
                continue
            log("%s: %s" % (host, ", ".join(
                "%s restarts=%s%s" % (p.get("name"), p.get("restarts", 0),
                                      " last_exit=%s" % p["last_exit"] if p.get("last_exit") else "")
                for p in st.get("processes", []))))

    def stop_all(self):
        """Whatever the block left running: each host's stack (h3pipe stop there), then the sshds."""
        for host, alias in HOSTS.items():
            subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", alias, self.h3, "stop"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
        for p in self.sshd.values():
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def ppid(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def shquote(v):
    return "'" + v.replace("'", "'\\''") + "'"


def batch_jobs(path):
    jobs = []
    for line in open(path):
        if line.strip():
            jobs.append(json.loads(line)["jobId"])
    return jobs


def check_outputs(site, run, jobs, check):
    mp4s = site.outputs(run)
    names = sorted(os.path.basename(m)[:-4] for m in mp4s)
    check(names == sorted(jobs), "one MP4 per job on node-241 and no other: %s (jobs %s)" % (names, sorted(jobs)))
    for mp4 in mp4s:
        job = os.path.basename(mp4)[:-4]
        digest = hashlib.sha256(open(mp4, "rb").read()).hexdigest()
        try:
            receipt = json.load(open(mp4[:-4] + ".pipeline.json"))
            side = open(mp4 + ".sha256").read().split()[0]
        except (OSError, ValueError, IndexError) as e:
            check(False, "%s: receipt and sidecar readable (%s)" % (job, e))
            continue
        check(receipt.get("mp4Sha256") == digest == side,
              "%s: receipt and sidecar name the MP4's SHA-256 (%s / %s / %s)" % (job, digest[:12],
                                                                              str(receipt.get("mp4Sha256"))[:12], side[:12]))
        p = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                            "stream=codec_name,width,height,nb_read_frames", "-of", "json", mp4],
                           capture_output=True, text=True)
        st = (json.loads(p.stdout or "{}").get("streams") or [{}])[0]
        check(p.returncode == 0 and int(st.get("nb_read_frames", 0)) > 0,
              "%s: ffprobe reads a video stream (%s)" % (job, st or p.stderr.strip()[-200:]))
    # A writer killed mid-write leaves its NAME.<token>.part: crash garbage, swept after a day
    # (artifacts.h sweep_parts).  Tolerated only beside the output it was for, written since;
    # a .part whose output is missing is a lost output.
    parts = [f for h in HOSTS for f in glob.glob(os.path.join(site.home[h], ".state", "**", "*.part"), recursive=True)]
    orphans = [f for f in parts if not os.path.exists(re.sub(r"(\.[0-9a-f]+)?\.part$", "", f))]
    if parts:
        log("note: %d .part file(s) of a killed writer left beside their outputs: %s" % (len(parts), parts[:5]))
    check(not orphans, "no .part file left without its output on either host%s" % (
        ": %s" % orphans[:5] if orphans else ""))


def check_learned(site, learned, check):
    """profile learn speaks the seeds' seconds (it divides by time_scale): each learned mean is
    within 25 % of the config's fixed profile it measured."""
    cfg = json.load(open(os.path.join(site.ops_dir, "cluster.json")))
    want = {(p["name"], cls): prof.get("seconds") for p in cfg.get("pools", [])
            for cls, prof in p.get("profiles", {}).items()}
    got = {(pool, cls): prof.get("mean") for pool, by in learned.get("profiles", {}).items()
           for cls, prof in by.items()}
    off = ["%s/%s learned %s for %s" % (pool, cls, m, want.get((pool, cls))) for (pool, cls), m in got.items()
           if not want.get((pool, cls)) or m is None or abs(m - want[(pool, cls)]) > 0.25 * want[(pool, cls)]]
    check(bool(got) and not off, "profile learn gives the seeds' seconds for %d pool/class pair(s)%s" % (
        len(got), ": " + "; ".join(off) if off else ""))


def check_same(site, n_jobs, check):
    for kind, ext in (("report", "json"), ("resume", "txt"), ("profile", "json")):
        files = {h: os.path.join(site.ops_dir, "%s.%s.%s" % (kind, h, ext)) for h in HOSTS}
        missing = [f for f in files.values() if not os.path.exists(f)]
        if missing:
            check(False, "%s from both hosts: the block wrote no %s" % (kind, ", ".join(missing)))
            continue
        texts = {h: open(f).read() for h, f in files.items()}
        if ext == "json":
            try:
                vals = {h: json.loads(t) for h, t in texts.items()}
            except ValueError as e:
                check(False, "%s --json: valid JSON on both hosts (%s)" % (kind, e))
                continue
        else:
            vals = texts
        if kind == "report" and isinstance(vals["node-241"], dict):
            rep = vals["node-241"]
            check(rep.get("receipts") == n_jobs and rep.get("jobs") == n_jobs,
                  "report counts every job's receipt (receipts %s, jobs %s of %d)" % (
                      rep.get("receipts"), rep.get("jobs"), n_jobs))
        if kind == "resume":
            m = re.search(r"(\d+) done, (\d+) in flight, re-enqueued (\d+) encode, (\d+) sample, (\d+) decode",
                          vals["node-241"])
            check(bool(m) and int(m.group(1)) == n_jobs and m.groups()[1:] == ("0",) * 4,
                  "resume of the finished run: %d done, nothing in flight or re-enqueued (%s)" % (
                      n_jobs, vals["node-241"].strip()))
        if kind == "profile" and isinstance(vals["node-241"], dict):
            check_learned(site, vals["node-241"], check)
        same = vals["node-292"] == vals["node-241"]
        check(same and texts["node-292"].strip() != "",
              "%s gives the same answer on node-292 and node-241%s" % (
                  kind, "" if same else ":\n--- node-292\n%s\n--- node-241\n%s" % (
                      texts["node-292"][-1500:], texts["node-241"][-1500:])))


class UnixResp(Resp):
    """chaos.Resp over a Unix socket (the managed Redis's own socket on its host)."""

    def _connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(self.addr[0])
        self.buf = b""
        self._send("AUTH", self.user, self.password)
        self._read()


def check_redis(site, run, check):
    """Nothing done twice, nothing left pending: read from the shared Redis as redis-admin, on
    node-241 (its socket in node-241's .state/redis; the TCP port is the TLS hop's)."""
    home = site.home["node-241"]
    pw = sorted(glob.glob(os.path.join(home, "**", "redis-admin.password"), recursive=True))
    sock = os.path.join(home, ".state", "redis", "redis.sock")
    if not pw:
        check(False, "redis-admin.password on node-241 (to read the shared Redis)")
        return
    r = UnixResp(sock, 0, open(pw[0]).read().strip(), "redis-admin")
    try:
        jobs = [s(j) for j in (r.cmd("ZRANGE", "h3pipe:run:{%s}:jobs" % run, 0, -1, retries=3) or [])]
    except Exception as e:  # noqa: BLE001  reported as the check's reason
        check(False, "the shared Redis at %s answers redis-admin (%s)" % (sock, e))
        return
    check(len(jobs) == len(batch_jobs(os.path.join(site.ops_dir, "batch.jsonl"))),
          "the run's job index in Redis holds every job of the batch (%d)" % len(jobs))
    dups = []
    for job in jobs:
        h = r.cmd("HGETALL", "h3pipe:run:{%s}:job:%s" % (run, job)) or []
        d = {s(h[i]): s(h[i + 1]) for i in range(0, len(h), 2)}
        dups += ["%s %s=%s" % (job, k, v) for k, v in d.items()
                 if (k.startswith("wrote:") or k == "done:transfer") and int(v) > 1]
    check(not dups, "no stage output written twice%s" % (": %s" % dups[:8] if dups else ""))
    pending = {}
    for key in r.cmd("KEYS", "h3pipe:stream:*") or []:
        key = s(key)
        try:
            for g in r.cmd("XINFO", "GROUPS", key) or []:
                gd = {s(g[i]): g[i + 1] for i in range(0, len(g), 2)}
                if int(gd.get("pending", 0)):
                    pending["%s/%s" % (key, s(gd.get("name")))] = int(gd["pending"])
        except RuntimeError:
            pass
    check(not pending, "no stage task left pending%s" % (": %s" % pending if pending else ""))
    try:
        dead = int(r.cmd("XLEN", "h3pipe:dead"))
    except RuntimeError:
        dead = 0
    check(dead == 0, "the dead-letter stream is empty (%d)" % dead)


def inner(a):
    if not os.access(SSHD, os.X_OK):
        log("FAIL: no %s (openssh-server): the two hosts need an sshd each" % SSHD)
        return 2
    doc = os.path.abspath(a.doc) if a.doc else os.path.join(os.path.abspath(a.src), "docs", "deploy.md")
    lines = block_lines(doc)
    if not lines:
        log("FAIL: %s has no block after %r" % (doc, MARKER))
        return 1
    site = Site(a)
    failures = []

    def check(ok, what):
        log(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)
        return ok

    try:
        try:
            site.setup()
        except Exception as e:  # noqa: BLE001
            log("set-up failed: %s" % e)
            failures.append("set-up")
            return 2
        log("operator folder %s; node-292 home %s; node-241 home %s" % (
            site.ops_dir, site.home["node-292"], site.home["node-241"]))
        t_block = time.monotonic()
        crashed = False
        for i, line in enumerate(lines, 1):
            if line.startswith("#"):
                if CRASH_WORDS in line:
                    jobs = batch_jobs(os.path.join(site.ops_dir, "batch.jsonl")) if os.path.exists(
                        os.path.join(site.ops_dir, "batch.jsonl")) else []
                    ok, what = site.crash_node241(len(jobs))
                    crashed = True
                    if not check(ok, "line %d (crash point): %s" % (i, what)):
                        break
                continue
            log("\n$ " + line)
            rc, out, dt = site.run_line(line, a.line_timeout)
            if out.strip():
                log(out.rstrip())
            log("[line %d: exit %d, %.1fs]" % (i, rc, dt))
            if not check(rc == 0, "line %d exits 0: %s" % (i, line.splitlines()[0])):
                log("the block stops at line %d (the lines after it depend on it)" % i)
                break
        else:
            log("\nthe block ran to its end in %.1fs" % (time.monotonic() - t_block))
            check(crashed, "the block has a crash point (a comment with %r)" % CRASH_WORDS)
            run = site.var("RUN")
            check(bool(run), "the block set RUN")
            jobs = batch_jobs(os.path.join(site.ops_dir, "batch.jsonl"))
            if run:
                check_outputs(site, run, jobs, check)
                check_same(site, len(jobs), check)
                check_redis(site, run, check)
        site.report_stacks()
        log("PASS" if not failures else "FAIL: %d check(s):\n  %s" % (len(failures), "\n  ".join(failures)))
        return 0 if not failures else 1
    finally:
        site.stop_all()
        if failures or a.keep:
            log("kept %s for inspection" % site.work)
        else:
            shutil.rmtree(site.work, ignore_errors=True)


def main():
    def args(p):
        p.add_argument("--src", default=REPO, help="the repository (docs/deploy.md, configs/)")
        p.add_argument("--doc", default=None, help="the file with the block (default: SRC/docs/deploy.md)")
        p.add_argument("--line-timeout", type=int, default=240, help="seconds one line of the block may take")

    return netns_main(__doc__, __file__, inner, args)


if __name__ == "__main__":
    sys.exit(main())
