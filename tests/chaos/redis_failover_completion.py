#!/usr/bin/python3
"""The primary dies right after a stage completion (issue #23 item 5; label redis).

The set-up of redis_failover.py (a primary, a replica, three Sentinels on 127.0.0.1; one `h3pipe start`
stack, sim runtime, whose config names only the Sentinels) with one sampler pool whose stage takes
--sample-s, short leases, and wait_replicas 1 / wait_timeout_ms --wait-ms.  One job per case; the
sample stage's completion is the one the primary dies after.  "The stage has started" is read on
the replica (exec:sample there: the execution note has replicated), "the completion ran" on the
primary (the job left state sample), "the worker had its answer" in the sampler's log (its
"sample done" line, or the warning that no replica acknowledged): no sleeps as synchronisation.

  a. WAIT holds the completion: the replica is stopped (SIGSTOP) once the stage started; the
     completion runs on the primary and its WAIT holds the worker (no "sample done" in its log
     --hold-s later); the replica is continued (within wait_timeout_ms); the primary is killed -9
     the moment the worker logs the completion.  Expect: the promoted replica holds it (job past
     sample, wrote:sample 1), one MP4, exec:sample 1 (not run twice), wrote:sample 1 (not
     committed twice).
  b. WAIT times out: the replica is stopped and its link cut on the primary (CLIENT KILL TYPE
     replica: what was sent before stays in the stopped replica's socket, nothing after reaches it,
     as in a partition); the completion runs, its WAIT times out (the worker warns); the primary is
     killed -9, the replica continued and promoted without the completion.  Expect: the promoted
     replica does not hold it (the job is still in sample: else the case proved nothing), nothing
     lost (the job done), one MP4, wrote:<stage> <= 1; printed: whether the stage was skipped (its
     output verified, exec:sample stays 1) or executed again (exec:sample 2), and the time from the
     kill until the job was done.

--partition-in-a cuts the replica's link in case a too (a check that the test can fail: the
completion is then lost and case a must FAIL).  --stop-only-in-b leaves the link in case b (the
replica only stopped past wait_timeout_ms): on one machine what the primary sent before it died
still waits in the stopped replica's socket, so case b then fails with "the case lost nothing".
`h3pipe preflight` runs first: every sentinel.* row and redis.replicas must PASS.  Every case
prints what happened; the last line is one JSON object.

Usage: redis_failover_completion.py --bin BUILD/bin    Exit: 0 pass, 1 fail, 2 set-up error, 77 skipped.
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos import s  # noqa: E402
from redis_failover import SENTINEL, SKIP, Failover, log, wait_for  # noqa: E402


class Completion(Failover):
    def stack_config(self):
        prof = lambda sec: {"default": {"kind": "fixed", "seconds": sec}}
        cfg = super().stack_config()
        cfg["name"] = "failover-completion"
        cfg["redis"]["wait_timeout_ms"] = self.a.wait_ms
        # A completion lost with the primary is taken again once its lease runs out.
        cfg["queue"] = {"lease_ms": 2000, "renew_ms": 400, "sweep_ms": 200}
        cfg["pools"] = [
            {"name": "enc", "host": "a", "stage": "encode", "profiles": prof(0.05)},
            {"name": "s0", "host": "a", "stage": "sample", "profiles": prof(self.a.sample_s)},
            {"name": "dec", "host": "a", "stage": "decode", "profiles": prof(0.05)},
        ]
        return cfg

    def job_hash(self, port, run, job):
        h = self.admin(port).cmd("HGETALL", "h3pipe:run:{%s}:job:%s" % (run, job), retries=1) or []
        return {s(h[i]): s(h[i + 1]) for i in range(0, len(h), 2)}

    def replica_snapshot(self, replica, run, job):
        """The job hash on the replica once its link to the dead primary is down (it has read all
        the primary sent) and before it is promoted (no service can write to it yet)."""
        def snap():
            d = self.info_repl(replica)
            if d.get("role") != "slave":
                raise RuntimeError("the replica was promoted before its snapshot")
            if d.get("master_link_status") != "down":
                return None
            h = self.job_hash(replica, run, job)
            return h if self.info_repl(replica).get("role") == "slave" else None
        return wait_for("the replica's link to the dead primary down", snap, 10, 0.005)

    def sampler_log(self):
        try:
            with open(os.path.join(self.state, "logs", "sampler-s0.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def submit(self, job):
        path = os.path.join(self.work, job + ".jsonl")
        with open(path, "w") as f:
            f.write(json.dumps({"jobId": job, "prompt": "completion " + job, "width": 64, "height": 64,
                                "frames": 9, "fps": 12, "seed": 7}) + "\n")
        out = self.h3_cmd(["run", path, "--background"])
        return [l for l in out.strip().splitlines() if l.startswith("r-")][-1]

    def preflight(self):
        """`h3pipe preflight` against the Sentinels: each one's rows and the primary's replicas."""
        out = self.h3_cmd(["preflight"], check=False)
        rows = [l.split(None, 3) for l in out.splitlines() if l[:4] in ("PASS", "WARN", "FAIL", "SKIP")]
        primary = "127.0.0.1:%d" % self.primary_port()
        problems = []
        for check in ("sentinel.reachable", "sentinel.auth", "sentinel.master", "sentinel.quorum"):
            for port, _ in self.sentinels:
                got = [r[0] for r in rows if r[1:3] == [check, "127.0.0.1:%d" % port]]
                if got != ["PASS"]:
                    problems.append("preflight %s 127.0.0.1:%d: %s" % (check, port, got or "no row"))
        for check in ("redis.reachable", "redis.replicas"):
            got = [r[0] for r in rows if r[1:3] == [check, primary]]
            if got != ["PASS"]:
                problems.append("preflight %s %s: %s" % (check, primary, got or "no row"))
        log("preflight: %d rows; sentinel.* and redis.replicas against %s: %s"
            % (len(rows), primary, "; ".join(problems) or "PASS"))
        if problems:
            log(out)
        return problems

    def one_case(self, name, job, cut, stop_until_kill):
        """Runs one job; kills the primary right after its sample completion.  Returns the facts."""
        primary = self.primary_port()
        replica = [p for p in self.servers if p != primary and self.servers[p].poll() is None][0]
        wait_for("the replica in sync", lambda: self.in_sync(primary), 60)
        log_mark = len(self.sampler_log())
        run = self.submit(job)
        # The stage has started and its execution note reached the replica.
        wait_for("sample started (exec:sample on the replica)",
                 lambda: self.job_hash(replica, run, job).get("exec:sample") == "1", 60, 0.005)
        os.kill(self.servers[replica].pid, signal.SIGSTOP)
        t_stop = time.time()
        if cut:
            # Nothing written from now on reaches the stopped replica.
            self.admin(primary).cmd("CLIENT", "KILL", "TYPE", "replica")
            wait_for("the primary without its replica",
                     lambda: self.info_repl(primary).get("connected_slaves") == "0", 10, 0.005)
        before = self.job_hash(primary, run, job).get("state")
        if before != "sample":
            raise RuntimeError("%s: the job was %s when the replica stopped: raise --sample-s" % (name, before))
        wait_for("the completion on the primary",
                 lambda: self.job_hash(primary, run, job).get("state") != "sample", 60, 0.002)
        t_applied = time.time()
        done_re = re.compile(r"run=%s job=%s sample done" % (run, job))
        warn_re = re.compile(r"run=%s job=%s sample: completion acknowledged by no replica" % (run, job))
        if not stop_until_kill:
            time.sleep(self.a.hold_s)  # the fault's length (the replica stays stopped), not a wait
        held = not done_re.search(self.sampler_log()[log_mark:])  # WAIT holds the worker
        if not stop_until_kill:
            os.kill(self.servers[replica].pid, signal.SIGCONT)
        t_cont = time.time()
        wait_for("the worker's answer", lambda: done_re.search(self.sampler_log()[log_mark:]), 30, 0.002)
        t_answer = time.time()
        self.servers[primary].kill()
        self.servers[primary].wait()
        t_kill = time.time()
        if stop_until_kill:
            os.kill(self.servers[replica].pid, signal.SIGCONT)
            t_cont = time.time()
        warned = bool(warn_re.search(self.sampler_log()[log_mark:]))
        snap = self.replica_snapshot(replica, run, job)
        events = sorted([(t_applied, "completion on the primary (worker held: %s)" % held),
                         (t_answer, "worker's answer (%s)" % ("WAIT timed out: no replica" if warned else "replicated")),
                         (t_kill, "primary %d killed -9" % primary), (t_cont, "replica continued")])
        log("%s: replica %d stopped at +0.000s%s; %s" % (name, replica, " and its link cut" if cut else "", "; ".join(
            "%s at +%.3fs" % (what, at - t_stop) for at, what in events)))
        new = wait_for("Sentinel's switch", lambda: (lambda p: p if p not in (None, primary) else None)(
            self.primary_port()), 60, 0.01)
        t_switch = time.time()
        if new != replica:
            raise RuntimeError("%s: Sentinel promoted %d, not the replica %d" % (name, new, replica))
        survived = snap.get("state") not in (None, "sample") and snap.get("wrote:sample") == "1"
        log("%s: the replica held the job in state %s (wrote:sample %s) when promoted: the completion %s; "
            "Sentinel switched to it %.2fs after the kill" % (name, snap.get("state"), snap.get("wrote:sample", "0"),
                                                            "survived" if survived else "was lost",
                                                            t_switch - t_kill))
        wait_for("the job done on the new primary", lambda: self.done(run, 1), 60, 0.02)
        t_done = time.time()
        final = self.job_hash(new, run, job)
        skipped = bool(re.search(r"run=%s job=%s sample: output already present and verified; skipping" % (run, job),
                                 self.sampler_log()[log_mark:]))
        facts = {"run": run, "job": job, "held_by_wait": held, "wait_timed_out": warned,
                 "hold_s": round(t_answer - t_applied, 3), "replica_stopped_s": round(t_cont - t_stop, 3), "link_cut": cut,
                 "switch_s": round(t_switch - t_kill, 3), "done_after_kill_s": round(t_done - t_kill, 3),
                 "survived": survived, "state_at_promotion": snap.get("state"),
                 "exec": {k: int(v) for k, v in final.items() if k.startswith("exec:")},
                 "wrote": {k: int(v) for k, v in final.items() if k.startswith("wrote:")},
                 "skipped_after_failover": skipped, "old": primary, "new": new}
        facts["redo"] = ("none" if survived else "skip (the latent verified; the runtime did not run)"
                         if skipped and facts["exec"].get("exec:sample") == 1 else
                         "executed again" if facts["exec"].get("exec:sample", 0) > 1 else "unknown")
        log("%s: job done %.2fs after the kill; exec %s, wrote %s; redo: %s"
            % (name, t_done - t_kill, facts["exec"], facts["wrote"], facts["redo"]))
        return facts

    def expect(self, name, f, wait_on):
        problems = []
        outs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(self.state, "outputs", f["run"], "*.mp4")))
        if outs != [f["job"] + ".mp4"]:
            problems.append("%s: MP4s %s, expected exactly %s.mp4" % (name, outs, f["job"]))
        for k, v in f["wrote"].items():
            if v > 1:
                problems.append("%s: %s = %d (an output committed twice)" % (name, k, v))
        if wait_on:
            if not f["held_by_wait"]:
                problems.append("%s: the worker was answered before the replica had the completion" % name)
            if f["wait_timed_out"]:
                problems.append("%s: WAIT timed out although the replica was continued within it" % name)
            if not f["survived"]:
                problems.append("%s: the promoted replica lacks the acknowledged completion (state %s)"
                                % (name, f["state_at_promotion"]))
            if f["exec"].get("exec:sample") != 1:
                problems.append("%s: exec:sample = %s, expected 1 (not executed twice)"
                                % (name, f["exec"].get("exec:sample")))
            if f["wrote"].get("wrote:sample") != 1:
                problems.append("%s: wrote:sample = %s, expected 1" % (name, f["wrote"].get("wrote:sample")))
        else:
            if not f["wait_timed_out"]:
                problems.append("%s: the worker did not warn that no replica acknowledged" % name)
            if f["survived"]:
                problems.append("%s: the promoted replica holds the completion: the case lost nothing" % name)
            if f["redo"] == "unknown":
                problems.append("%s: the stage was neither skipped nor executed again" % name)
        return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bin", required=True)
    p.add_argument("--sample-s", type=float, default=1.0)
    p.add_argument("--wait-ms", type=int, default=1500, help="redis.wait_timeout_ms")
    p.add_argument("--hold-s", type=float, default=0.5,
                   help="case a: how long the replica stays stopped after the completion (< --wait-ms)")
    p.add_argument("--partition-in-a", action="store_true", help="cut the replica's link in case a too (must FAIL)")
    p.add_argument("--stop-only-in-b", action="store_true",
                   help="case b without cutting the link: shows whether a stopped replica still gets the completion")
    p.add_argument("--keep", action="store_true", help="keep the work dir")
    a = p.parse_args()
    if not os.access(SENTINEL, os.X_OK):
        log("skipped: %s missing (Debian's redis-sentinel; scripts/setup.sh installs it)" % SENTINEL)
        return SKIP
    f = Completion(a)
    rc = 1
    try:
        try:
            f.setup()
        except Exception as e:
            log("set-up error: %s (work dir %s)" % (e, f.work))
            return 2
        t0 = time.time()
        problems = f.preflight()
        fa = f.one_case("case a (WAIT on)", "a000", a.partition_in_a, a.partition_in_a)
        problems += f.expect("case a", fa, True)
        # The old primary back from its AOF: Sentinel makes it a replica of the new one.
        f.start_server(fa["old"])
        wait_for("the old primary re-joined as a replica in sync", lambda: f.in_sync(fa["new"]), 60)
        fb = f.one_case("case b (WAIT timed out)", "b000", not a.stop_only_in_b, True)
        problems += f.expect("case b", fb, False)
        for x in problems:
            log("FAIL: " + x)
        f.results = {"test": "failover_completion", "case_a": fa, "case_b": fb, "problems": problems,
                     "cases_s": round(time.time() - t0, 2), "pass": not problems}
        print(json.dumps(f.results), flush=True)
        rc = 0 if not problems else 1
    except Exception as e:
        log("FAIL: %s (work dir %s)" % (e, f.work))
        pth = os.path.join(f.state, "logs", "sampler-s0.log")
        if os.path.exists(pth):
            log(open(pth, errors="replace").read()[-3000:])
        rc = 1
    finally:
        f.stop()
        if rc == 0 and not a.keep:
            shutil.rmtree(f.work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
