#!/usr/bin/python3
"""Sampler duty cycle with decode on another host (issue #24 item 3).

Host a (namespace A): Redis, the encoder and one sampler; host b (namespace B, a veth pair shaped
to 2.35 Gbit/s): the decoder.  Every latent crosses the link through the transfer services
(CURVE, durable, verified).  All jobs are submitted at once (a full queue); afterwards
`h3pipe report RUN --json` gives the sampler's duty cycle (its busy share of its span) and its
bubbles by cause, and the transfer's wire and verify seconds per job.  The stacks are
tests/chaos/chaos.py's (the same set-up, without kills).  The last line is one JSON object.

Usage: duty_netns.py --bin BUILD/bin [--jobs 16 --sample-s 0.5]
Exit status: 0 duty cycle >= --target, 1 below, 77 skipped (not root / no namespaces), 2 set-up error.
"""
import glob
import json
import os
import shutil
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "chaos"))
import chaos  # noqa: E402


class DutyRun(chaos.Chaos):
    def pool_list(self, prof):
        a = self.a
        return [
            {"name": "enc", "host": "a", "stage": "encode", "profiles": prof(a.encode_s)},
            {"name": "s0", "host": "a", "stage": "sample", "profiles": prof(a.sample_s)},
            {"name": "dec", "host": "b", "stage": "decode", "profiles": prof(a.decode_s)},
        ]


def inner(a):
    c = DutyRun(a)
    try:
        c.setup()
    except Exception as e:
        chaos.log("set-up failed: %s" % e)
        c.stop()
        return 2
    try:
        run = c.submit("duty")
        if not c.wait_done(run, a.stall_s):
            chaos.log("FAIL: the run stalled; kept %s" % c.work)
            a.keep = True
            return 1
        dest = os.path.join(c.state["a"], "outputs", run)
        os.makedirs(dest, exist_ok=True)
        for f in glob.glob(os.path.join(c.state["b"], "outputs", run, "*.pipeline.json")):
            shutil.copy(f, dest)
        r = json.loads(c.run_h3(["report", run, "--json"], host="a").strip().splitlines()[-1])
        s0 = [p for p in r["pools"] if p["name"] == "s0"][0]
        xfer = [s for j in r["job_timing"] for s in j["stages"] if s["stage"] == "transfer"]
        med = lambda k: round(statistics.median([s[k] for s in xfer]), 4) if xfer else None
        out = {"bench": "duty-netns", "jobs": r["jobs"], "sample_s": a.sample_s,
               "sampler_duty_cycle": round(s0["duty_cycle"], 4), "target": a.target,
               "bubble_s": {k: round(v, 4) for k, v in s0["bubble_s"].items()},
               "transfer_median_s": {k: med(k) for k in ("total_s", "wait_s", "wire_s", "verify_s")},
               "steady_rate_per_hour": round(r["measured"]["steady_rate_per_hour"], 1),
               "planned_steady_rate_per_hour": round(r["planned"]["steady_rate_per_hour"], 1),
               "makespan_s": round(r["measured"]["makespan_s"], 3), "planned_makespan_s": round(r["planned"]["makespan_s"], 3),
               "real_time_factor_mean": round(r["measured"]["real_time_factor_mean"], 4)}
        ok = s0["duty_cycle"] >= a.target and r["jobs"] == a.jobs
        out["pass"] = ok
        chaos.log(json.dumps(out))
        return 0 if ok else 1
    finally:
        c.stop_tracker.set()
        c.stop()
        if not a.keep:
            shutil.rmtree(c.work, ignore_errors=True)


def main():
    def args(p):
        p.add_argument("--jobs", type=int, default=16)
        p.add_argument("--encode-s", type=float, default=0.05)
        p.add_argument("--sample-s", type=float, default=0.5)
        p.add_argument("--decode-s", type=float, default=0.2)
        p.add_argument("--target", type=float, default=0.97)

    return chaos.netns_main(__doc__, __file__, inner, args)


if __name__ == "__main__":
    sys.exit(main())
