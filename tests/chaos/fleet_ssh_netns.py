#!/usr/bin/python3
"""`h3pipe start --all` / `stop --all` over real SSH across two network namespaces.

Hosts a and b are chaos.py's two namespaces (Redis on a, run by the test as an operator would;
host a: encoder and samplers, host b: the decoder and the transfer receiver).  Each namespace runs
a real sshd (Debian's OpenSSH, key auth, a host key known to the client) whose sessions get that
host's state dir (sshd's SetEnv H3PIPE_STATE: the two "machines" share one filesystem).  From
host a the operator's CLI runs, with the hosts' aliases in an ssh client config
(`--ssh-config`) and the CLI's path on the hosts (`--remote-bin`):

  1. `start --all`: both hosts' stacks start over ssh (control host first) and preflight passes
     on each; exit 0.
  2. a batch runs: every job's MP4 lands on b.
  3. `start --all` again: each host answers "already running" (its own stack of this config),
     exit 0, preflight runs, no process changes (#34 P6).  Then after `stop --all`, host a started
     by hand and `start --all`: a stays as it is, b starts, exit 0.
  4. `stop --all`: exit 0, and every service process either host ran has exited.

Usage: fleet_ssh_netns.py --bin BUILD/bin [--jobs 4]
Exit status: 0 pass, 1 fail, 77 skipped (not root / no namespaces / no sshd), 2 set-up error.
"""
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402

SSHD = "/usr/sbin/sshd"


class Unavailable(Exception):
    """What this machine cannot provide for the test (a skip, not a failure)."""


class Fleet(chaos.Chaos):
    def adjust_config(self, cfg, keys):
        for h in cfg["hosts"]:
            h["ssh"] = "h3-" + h["name"]  # an alias of the client config, never the address

    def start_sshd(self, host, ip):
        d = os.path.join(self.work, "ssh")
        key = os.path.join(d, "host-" + host)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        conf = os.path.join(d, "sshd-%s.conf" % host)
        with open(conf, "w") as f:
            f.write("\n".join([
                "ListenAddress %s:22" % ip, "HostKey " + key,
                "AuthorizedKeysFile " + os.path.join(d, "authorized_keys"),
                "PermitRootLogin prohibit-password", "PasswordAuthentication no",
                "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
                "PidFile " + os.path.join(d, "sshd-%s.pid" % host),
                # The two hosts share this filesystem: each session gets its host's state dir.
                "SetEnv H3PIPE_STATE=" + self.state[host], ""]))
        argv = [SSHD, "-D", "-e", "-f", conf]
        if host == "b":
            argv = ["ip", "netns", "exec", self.a.ns_b] + argv
        self.sshd.append(subprocess.Popen(argv, stderr=open(os.path.join(d, "sshd-%s.log" % host), "wb")))
        with open(key + ".pub") as pub:
            self.known.append("%s %s" % (ip, " ".join(pub.read().split()[:2])))

    def setup_ssh(self):
        d = os.path.join(self.work, "ssh")
        os.makedirs(d, mode=0o700)
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        client = os.path.join(d, "client")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", client], check=True)
        shutil.copy(client + ".pub", os.path.join(d, "authorized_keys"))
        self.sshd, self.known = [], []
        for host, ip in (("a", self.a.ip_a), ("b", self.a.ip_b)):
            self.start_sshd(host, ip)
        with open(os.path.join(d, "known_hosts"), "w") as f:
            f.write("\n".join(self.known) + "\n")
        self.ssh_config = os.path.join(d, "config")
        with open(self.ssh_config, "w") as f:
            for host, ip in (("a", self.a.ip_a), ("b", self.a.ip_b)):
                f.write("Host h3-%s\n  HostName %s\n  User root\n  IdentityFile %s\n  IdentitiesOnly yes\n"
                        "  UserKnownHostsFile %s\n  StrictHostKeyChecking yes\n  LogLevel ERROR\n"
                        % (host, ip, client, os.path.join(d, "known_hosts")))
        for host in ("a", "b"):
            deadline = time.time() + 10
            while subprocess.run(["ssh", "-F", self.ssh_config, "-o", "BatchMode=yes", "h3-" + host, "true"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
                if time.time() > deadline:
                    logs = open(os.path.join(d, "sshd-%s.log" % host), errors="replace").read()
                    if "account is locked" in logs:  # this machine's root, not h3pipe
                        raise Unavailable("sshd refuses root here: its account is locked (passwd -l)")
                    raise RuntimeError("sshd of host %s did not answer; see %s" % (host, d))
                time.sleep(0.05)

    def fleet(self, action):
        argv = [self.h3, "--config", self.config, action, "--all", "--ssh-config", self.ssh_config,
                "--remote-bin", self.h3]
        # The operator's own state dir is neither host's.
        env = dict(os.environ, H3PIPE_STATE=os.path.join(self.work, "operator"))
        r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        return r.returncode, r.stdout

    def stop_sshd(self):
        for p in getattr(self, "sshd", []):
            p.terminate()
            p.wait()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited: its parent (the supervisor) is gone or reaping.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def inner(a):
    a.encode_s, a.sample_s, a.decode_s = 0.05, 0.2, 0.05
    if not os.access(SSHD, os.X_OK):
        chaos.log("SKIP: no %s (openssh-server)" % SSHD)
        return chaos.SKIP
    c = Fleet(a)
    failures = []

    def check(ok, what):
        chaos.log(("ok    " if ok else "FAIL  ") + what)
        if not ok:
            failures.append(what)

    try:
        try:
            c.prepare()
            c.setup_ssh()
        except Unavailable as e:
            chaos.log("SKIP: %s" % e)
            return chaos.SKIP
        except Exception as e:
            chaos.log("set-up failed: %s" % e)
            return 2
        rc, out = c.fleet("start")
        chaos.log(out)
        check(rc == 0, "start --all exits 0 (exit %d)" % rc)
        check("every host started and passed preflight" in out, "start --all: every host started and passed preflight")
        procs = c.processes()
        check({h for h, _, _ in procs} == {"a", "b"}, "both hosts run services: %s" % sorted({h for h, _, _ in procs}))
        if rc == 0:
            run = c.submit("fleet")
            check(c.wait_done(run, a.stall_s), "the batch finished")
            check(len(c.outputs(run)) == a.jobs, "%d of %d MP4s on host b" % (len(c.outputs(run)), a.jobs))
            rc2, out2 = c.fleet("start")
            check(rc2 == 0 and out2.count("(already running)") == 2,
                  "a second start --all: both hosts already running, exit %d" % rc2)
            check("every host started and passed preflight" in out2, "the second start --all ran preflight")
            check(sorted(c.processes()) == sorted(procs), "the second start --all changed no process")
            # A partial start: host a up (started by hand), b down; start --all starts the rest.
            rc3, out3 = c.fleet("stop")
            check(rc3 == 0 and not c.processes(), "stop --all before the partial start (exit %d)" % rc3)
            r = subprocess.run(["ssh", "-F", c.ssh_config, "-o", "BatchMode=yes", "h3-a", c.h3, "start",
                                "--host", "a", "--config", c.config],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
            chaos.log(r.stdout)
            check(r.returncode == 0, "host a started by hand (exit %d)" % r.returncode)
            by_hand = c.processes()
            check({h for h, _, _ in by_hand} == {"a"}, "only host a runs: %s" % sorted({h for h, _, _ in by_hand}))
            rc4, out4 = c.fleet("start")
            chaos.log(out4)
            check(rc4 == 0 and out4.count("(already running)") == 1,
                  "start --all after a partial start: a already running, b started, exit %d" % rc4)
            procs = c.processes()
            check({h for h, _, _ in procs} == {"a", "b"}, "both hosts run services again")
            check(sorted(p for p in procs if p[0] == "a") == sorted(by_hand), "host a's processes were left as they were")
        rc, out = c.fleet("stop")
        chaos.log(out)
        check(rc == 0, "stop --all exits 0 (exit %d)" % rc)
        deadline = time.time() + 20
        while time.time() < deadline and any(alive(pid) for _, _, pid in procs):
            time.sleep(0.05)
        left = ["%s/%s %d" % p for p in procs if alive(p[2])]
        check(not left, "every service process has exited after stop --all%s" % (": " + ", ".join(left) if left else ""))
        chaos.log("PASS" if not failures else "FAIL: %d check(s)" % len(failures))
        return 0 if not failures else 1
    finally:
        c.stop_tracker.set()
        c.stop()
        c.stop_sshd()
        if not a.keep and not failures:
            shutil.rmtree(c.work, ignore_errors=True)


def main():
    return chaos.netns_main(__doc__, __file__, inner, lambda p: p.add_argument("--jobs", type=int, default=4), seed=1)


if __name__ == "__main__":
    sys.exit(main())
