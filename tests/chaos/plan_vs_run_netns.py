#!/usr/bin/python3
"""Plan against run across two network namespaces (issue #13): a two-decode-host topology.

Host a (namespace A): Redis, the encoder, a fast and a slow sampler and a slow decoder; host b
(namespace B, a veth pair shaped to 2.35 Gbit/s): a fast decoder.  Every finished latent goes to
the host that would decode it first (the one decode-host choice, decode_route.h): over the link to
b, or decoded where it is when b's queue is long.  The stacks are chaos.py's (the same set-up,
without kills).  Afterwards `h3pipe report` plans the same jobs on the same config and compares:
the planned and measured makespan, their ratio, the worst stage start against the plan (pool by
pool, in turn) and the jobs run on another pool than planned.  The last line is one JSON object.

Usage: plan_vs_run_netns.py --bin BUILD/bin [--jobs 12]
Exit status: 0 within the bounds (--makespan-tol, --start-tol), 1 outside, 77 skipped (not root / no
namespaces), 2 set-up error.
"""
import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402


class PlanRun(chaos.Chaos):
    def pool_list(self, prof):
        return [
            {"name": "enc", "host": "a", "stage": "encode", "profiles": prof(0.1)},
            {"name": "s-fast", "host": "a", "stage": "sample", "profiles": prof(1.0)},
            {"name": "s-slow", "host": "a", "stage": "sample", "profiles": prof(1.6)},
            {"name": "dec-a", "host": "a", "stage": "decode", "profiles": prof(1.0)},
            {"name": "dec-b", "host": "b", "stage": "decode", "profiles": prof(0.8)},
        ]

    def adjust_config(self, cfg, keys):
        # Host a decodes too, so its transfer service receives: it admits host a's own key (no
        # other host samples), on a port of its own.
        pub_a = open(os.path.join(keys, "a.pub")).read().strip()
        cfg["hosts"][0]["transfer_allowed_clients"] = [pub_a]
        cfg["hosts"][0]["transfer_port"] = chaos.free_port(self.a.ip_a)

    def outputs(self, run):
        return sorted(glob.glob(os.path.join(self.state["a"], "outputs", run, "*.mp4")) +
                      glob.glob(os.path.join(self.state["b"], "outputs", run, "*.mp4")))


def inner(a):
    a.encode_s, a.sample_s, a.decode_s = 0.1, 1.0, 0.3  # read by the base class only for its own pools
    c = PlanRun(a)
    try:
        c.setup()
    except Exception as e:
        chaos.log("set-up failed: %s" % e)
        c.stop()
        return 2
    try:
        run = c.submit("pvr")
        if not c.wait_done(run, a.stall_s):
            chaos.log("FAIL: the run stalled; kept %s" % c.work)
            a.keep = True
            return 1
        # The report reads one host's outputs folder: the receipts of both decode hosts, together.
        dest = os.path.join(c.state["a"], "outputs", run)
        os.makedirs(dest, exist_ok=True)
        for f in glob.glob(os.path.join(c.state["b"], "outputs", run, "*.pipeline.json")):
            shutil.copy(f, dest)
        r = json.loads(c.run_h3(["report", run, "--json"], host="a").strip().splitlines()[-1])
        hosts = {}
        for f in glob.glob(os.path.join(dest, "*.pipeline.json")):
            for st in json.load(open(f))["stages"]:
                if st.get("stage") == "STAGE_DECODE":
                    hosts[st["host"]] = hosts.get(st["host"], 0) + 1
        p, m = r["planned"]["makespan_s"], r["measured"]["makespan_s"]
        out = {"bench": "plan-vs-run-netns", "jobs": r["jobs"], "planned_s": round(p, 3), "measured_s": round(m, 3),
               "ratio": round(m / p, 4), "worst_start_delta_s": round(r["worst_start_delta_s"], 3),
               "worst_start_error": round(r["worst_start_error"], 4), "worst_start_at": r["worst_start_at"],
               "assignment_differences": r["assignment_differences"], "decoded_on": hosts}
        ok = (abs(m / p - 1) <= a.makespan_tol and r["worst_start_error"] <= a.start_tol and
              r["assignment_differences"] == 0 and r["jobs"] == a.jobs)
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
        p.add_argument("--jobs", type=int, default=12)
        p.add_argument("--makespan-tol", type=float, default=0.02)
        p.add_argument("--start-tol", type=float, default=0.03)

    return chaos.netns_main(__doc__, __file__, inner, args)


if __name__ == "__main__":
    sys.exit(main())
