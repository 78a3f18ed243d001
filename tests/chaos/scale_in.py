#!/usr/bin/python3
"""Scale-in without recompute (issue #23 item 4; label e2e): SIGTERM to a sampler mid-task.

A local stack (`h3pipe start`, its private Redis, sim runtime: encoder, samplers s0 and s1 with a
--sample-s task, decoder) runs one job per case; when a sampler holds the sample task it gets
SIGTERM, with H3PIPE_STOP_GRACE_S (what the Helm chart sets from terminationGracePeriodSeconds):
  long:  a grace longer than the task: the task finishes on that sampler (exec:sample 1, no hand-back);
  short: a grace shorter than the task: the sampler hands it back when its grace (less the margin)
         is up, within 1 s of that the other sampler holds it, and the job ends with one MP4
         (handed_back:sample 1 in the job hash).
Prints per case the times from SIGTERM; the last line is one JSON object.  Exit 0 pass, 1 fail.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chaos import Resp, s  # noqa: E402


def log(msg):
    print(msg, flush=True)


def wait_for(what, cond, timeout_s, step_s=0.01):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step_s)
    raise RuntimeError("timed out after %.0fs waiting for %s" % (timeout_s, what))


def case(a, name, grace):
    work = tempfile.mkdtemp(prefix="h3scalein-")
    state = os.path.join(work, "state")
    cfg_path = os.path.join(work, "cluster.json")
    prof = lambda sec: {"default": {"kind": "fixed", "seconds": sec}}
    cfg = {"name": "scale-in", "state_dir": state,
           "stages": {st: {"runtime": {"name": "sim", "settings": {}}} for st in ("encode", "sample", "decode")},
           "hosts": [{"name": "a", "address": "127.0.0.1", "bind": "127.0.0.1"}],
           "pools": [{"name": "enc", "host": "a", "stage": "encode", "profiles": prof(0.05)},
                     {"name": "s0", "host": "a", "stage": "sample", "profiles": prof(a.sample_s)},
                     {"name": "s1", "host": "a", "stage": "sample", "profiles": prof(a.sample_s)},
                     {"name": "dec", "host": "a", "stage": "decode", "profiles": prof(0.05)}]}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, H3PIPE_STATE=state, H3PIPE_STOP_GRACE_S=str(grace))
    h3 = lambda argv: subprocess.run([os.path.join(a.bin, "h3pipe"), "--config", cfg_path] + argv, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, check=True)
    res = {"case": name, "grace_s": grace, "sample_s": a.sample_s}
    try:
        h3(["start"])
        st = json.load(open(os.path.join(state, "stack.json")))
        pw = open(os.path.join(state, "secrets", "redis-admin.password")).read().strip()
        r = Resp(st["redis"]["host"], st["redis"]["port"], pw, "redis-admin")
        pids = {p["name"]: p["pid"] for p in st["processes"]}
        batch = os.path.join(work, "b.jsonl")
        with open(batch, "w") as f:
            f.write(json.dumps({"jobId": "j000", "prompt": "scale-in", "width": 64, "height": 64, "frames": 9,
                                "fps": 12, "seed": 1}) + "\n")
        run = h3(["run", batch, "--background"]).stdout.strip().splitlines()[-1]

        def holder():
            rows = r.cmd("XPENDING", "h3pipe:stream:sample", "sample", "-", "+", 10) or []
            return [(s(x[0]), s(x[1]), int(x[3])) for x in rows]
        first = wait_for("a sampler holding the task", holder, 60)[0]
        victim = first[1]
        t0 = time.time()
        os.kill(pids["sampler-" + victim], signal.SIGTERM)
        log("%s: SIGTERM to sampler %s (grace %.1fs) holding %s" % (name, victim, grace, first[0]))
        job = "h3pipe:run:{%s}:job:j000" % run

        def job_hash():
            h = r.cmd("HGETALL", job) or []
            return {s(h[i]): s(h[i + 1]) for i in range(0, len(h), 2)}
        if name == "short":
            other = wait_for("the task held by another consumer or redelivered",
                             lambda: [x for x in holder() if x[1] != victim or x[2] > first[2]], 30)
            res["taken_again_s"] = round(time.time() - t0, 3)
            res["taken_by"] = other[0][1]
            margin = min(2.0, 0.2 * grace)
            res["after_grace_s"] = round(res["taken_again_s"] - (grace - margin), 3)
            log("%s: taken again by %s %.2fs after SIGTERM (%.2fs after the grace less margin)"
                % (name, res["taken_by"], res["taken_again_s"], res["after_grace_s"]))
        wait_for("the job done", lambda: job_hash().get("state") == "done", 60, 0.05)
        res["done_s"] = round(time.time() - t0, 3)
        h = job_hash()
        res["exec_sample"] = int(h.get("exec:sample", 0))
        res["handed_back"] = int(h.get("handed_back:sample", 0))
        res["mp4s"] = len(glob.glob(os.path.join(state, "outputs", run, "*.mp4")))
        problems = []
        if res["mp4s"] != 1:
            problems.append("%d MP4s" % res["mp4s"])
        if int(h.get("wrote:sample", 0)) != 1:
            problems.append("wrote:sample %s" % h.get("wrote:sample"))
        if name == "long" and (res["handed_back"] or res["exec_sample"] != 1):
            problems.append("the task did not finish on its sampler: %s" % h)
        if name == "short":
            if res["handed_back"] != 1:
                problems.append("handed_back:sample %s" % h.get("handed_back:sample"))
            if res["after_grace_s"] > 1.0:
                problems.append("taken again %.2fs after the grace (more than 1 s)" % res["after_grace_s"])
        res["problems"] = problems
        return res
    finally:
        subprocess.run([os.path.join(a.bin, "h3pipe"), "--config", cfg_path, "stop"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--sample-s", type=float, default=4.0)
    a = p.parse_args()
    a.bin = os.path.abspath(a.bin)
    out = [case(a, "long", a.sample_s + 6), case(a, "short", 1.5)]
    problems = [c["case"] + ": " + x for c in out for x in c["problems"]]
    for x in problems:
        log("FAIL: " + x)
    print(json.dumps({"cases": out, "pass": not problems}), flush=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
