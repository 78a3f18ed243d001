#!/usr/bin/python3
"""One answer from every host (issue #34 P8, P10): `report`, `profile learn` and `resume` after a
finished run, on the sampler host and on the decode host of chaos.py's two-host stack.

Host a (namespace A): Redis, the encoder, two samplers; host b (namespace B): the decoder, whose
disk alone holds the MP4s and their receipts (JOB.pipeline.json).  After a finished run:
  * `report RUN --json` on a and on b print the same object (the receipts come from Redis, where
    the decoder's completion keeps them), with every job in it and a plan beside it;
  * `report RUN --json` without --config on a plans against the config its stack runs (stack.json)
    and names the jobs' class from it, as with --config;
  * `profile learn RUN --json` on a and on b print the same object;
  * `resume RUN` on a and on b print the same line, every job done, nothing re-enqueued, and
    nothing lands on any stage stream or in the run's counters (a resume on the sampler host once
    re-enqueued every decode of a finished run).
The last line is one JSON object.

Usage: one_answer_netns.py --bin BUILD/bin [--jobs 4]
Exit status: 0 pass, 1 fail, 77 skipped (not root / no namespaces), 2 set-up error.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


class OneAnswer(chaos.Chaos):
    def pool_list(self, prof):
        # Jobs of class "small" (chaos.py's 64x64x9 batch): report names it from the config.
        small = lambda sec: {"small": {"kind": "fixed", "seconds": sec}}
        return [
            {"name": "enc", "host": "a", "stage": "encode", "profiles": small(0.05)},
            {"name": "s0", "host": "a", "stage": "sample", "profiles": small(0.2)},
            {"name": "s1", "host": "a", "stage": "sample", "profiles": small(0.2)},
            {"name": "dec", "host": "b", "stage": "decode", "profiles": small(0.1)},
        ]

    def adjust_config(self, cfg, keys):
        cfg["classes"] = [{"name": "small", "width": 64, "height": 64, "frames": 9}]

    def cli(self, argv, host, with_config=True):
        """(exit status, stdout, stderr) of the CLI on a host, with or without --config."""
        cmd = [self.h3] + (["--config", self.config] if with_config else []) + argv
        if host == "b":
            cmd = ["ip", "netns", "exec", self.a.ns_b] + cmd
        r = subprocess.run(cmd, env=self.env(host), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return r.returncode, r.stdout, r.stderr

    def streams(self):
        out = {}
        for key in ("h3pipe:stream:encode", "h3pipe:stream:sample", "h3pipe:stream:decode@b"):
            out[key] = int(self.r.cmd("XLEN", key) or 0)
        return out


def parsed(text):
    try:
        return json.loads(text)
    except ValueError:
        return None


def inner(a):
    a.encode_s, a.sample_s, a.decode_s = 0.05, 0.2, 0.1
    c = OneAnswer(a)
    try:
        c.setup()
    except Exception as e:
        chaos.log("set-up failed: %s" % e)
        c.stop()
        return 2
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            chaos.log("FAIL: " + what)

    try:
        run = c.submit("one")
        if not c.wait_done(run, a.stall_s):
            chaos.log("FAIL: the run stalled; kept %s" % c.work)
            return 1
        total, done, failed = c.run_state(run)
        check(done == a.jobs and failed == 0, "run %s: %d done, %d failed of %d" % (run, done, failed, a.jobs))
        out = {"run": run, "jobs": a.jobs}

        reports = {}
        for host in ("a", "b"):
            rc, so, se = c.cli(["report", run, "--json"], host)
            reports[host] = parsed(so)
            check(rc == 0 and reports[host] is not None, "report on %s: exit %d: %s" % (host, rc, se.strip()))
        ra, rb = reports["a"], reports["b"]
        check(ra is not None and ra == rb, "report --json differs between a and b")
        if ra:
            check(ra.get("jobs") == a.jobs and ra.get("receipts") == a.jobs,
                  "report: %s jobs, %s receipts, expected %d" % (ra.get("jobs"), ra.get("receipts"), a.jobs))
            check("planned" in ra, "report with --config: no plan")
            out["report_jobs"] = ra.get("jobs")
            out["measured_makespan_s"] = ra.get("measured", {}).get("makespan_s")

        # P10: without --config, the stack's config (stack.json) plans and names the classes.
        rc, so, se = c.cli(["report", run, "--json"], "a", with_config=False)
        bare = parsed(so)
        check(rc == 0 and bare is not None, "report without --config on a: exit %d: %s" % (rc, se.strip()))
        if bare:
            check(bare.get("planned", {}).get("config") == c.config,
                  "report without --config planned against %r, not the stack's %s" %
                  (bare.get("planned", {}).get("config"), c.config))
            classes = sorted({cls for p in bare.get("pools", []) for cls in p.get("classes", {})})
            check(classes == ["small"], "report without --config names the classes %s, not [small]" % classes)

        learned = {}
        for host in ("a", "b"):
            rc, so, se = c.cli(["profile", "learn", run, "--json"], host)
            learned[host] = parsed(so)
            check(rc == 0 and learned[host] is not None, "profile learn on %s: exit %d: %s" % (host, rc, se.strip()))
        check(learned["a"] is not None and learned["a"] == learned["b"], "profile learn --json differs between a and b")
        if learned["a"]:
            check("small" in learned["a"].get("profiles", {}).get("dec", {}),
                  "profile learn: no profile for dec/small: %s" % learned["a"].get("profiles"))

        before = (c.streams(), c.run_state(run))
        answers = {}
        for host in ("a", "b"):
            rc, so, se = c.cli(["resume", run], host)
            answers[host] = so.strip()
            chaos.log("resume on %s: exit %d: %s %s" % (host, rc, so.strip(), se.strip()))
            check(rc == 0, "resume on %s: exit %d" % (host, rc))
        check(answers["a"] == answers["b"], "resume differs: a %r, b %r" % (answers["a"], answers["b"]))
        want = "resume %s: %d done, 0 in flight, re-enqueued 0 encode, 0 sample, 0 decode" % (run, a.jobs)
        check(answers["a"] == want, "resume on a: %r, expected %r" % (answers["a"], want))
        after = (c.streams(), c.run_state(run))
        check(before == after, "resume changed the streams or the run: %s -> %s" % (before, after))
        out["resume"] = answers["a"]
        out["pass"] = not failures
        out["failures"] = failures
        chaos.log(json.dumps(out))
        return 0 if not failures else 1
    finally:
        c.stop()
        if not a.keep and not failures and os.path.isdir(c.work):
            shutil.rmtree(c.work, ignore_errors=True)


def main():
    def args(p):
        p.add_argument("--jobs", type=int, default=4)

    return chaos.netns_main(__doc__, __file__, inner, args)


if __name__ == "__main__":
    sys.exit(main())
