#!/usr/bin/env bash
# Fair share between users (issue #39; docs/design.md, "The claim order"), live on the local stack
# with the sim runtime: one pool per stage (encode 20 ms, sample SAMPLE_S, decode 20 ms), USERS
# users with equal weights submitting JOBS jobs each, one after another (STAGGER_S apart).
#  - fairness: Jain's index of the sampler's pool-seconds per user over the contended window
#    (from the first sample start until the first user's last sample start: every user had work
#    queued throughout), from the receipts; >= 0.99 is the goal;
#  - makespan: the same jobs again as one user (first come, first served: one user's jobs are
#    taken in stream order), and the ratio of the two makespans (first encode start to last
#    decode end); within 1 % is the goal;
#  - the planner (#39 item 5): profiles learned from the first come first served phase (`profile
#    learn`, its first run), then `plan --mix userN:JOBS@OFFSET,...` with each user's measured
#    submission offset; its per-user p95 job latency beside the fair phase's (receipts' endToEndS,
#    p95 by nearest rank, as the planner computes it) and their ratio; within 5 % is the goal.
# Prints both figures and one JSON line.  Usage: scripts/bench_fairness.sh [JOBS [USERS]]
# (H3PIPE_BUILD: build dir, default build; SAMPLE_S default 0.3; STAGGER_S default 0.5)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3PIPE_BUILD:-build}
jobs=${1:-20}
users=${2:-3}
sample_s=${SAMPLE_S:-0.3}
stagger=${STAGGER_S:-0.5}
bin=$build/bin/h3pipe
[[ -x $bin ]] || { echo "build first: $bin missing" >&2; exit 2; }
work=$(mktemp -d)
cli="$bin --config $work/cluster.json"
trap '$cli stop >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
/usr/bin/python3 - "$work" "$sample_s" <<'PY'
import json, sys
d, s = sys.argv[1], float(sys.argv[2])
pool = lambda n, st, t: {"name": n, "host": "local", "stage": st,
                         "profiles": {"default": {"kind": "fixed", "seconds": t}}}
json.dump({"name": "fairness", "hosts": [{"name": "local"}], "state_dir": d + "/state",
           "queue": {"lease_ms": 3000, "renew_ms": 500, "sweep_ms": 500, "block_ms": 100},
           "pools": [pool("enc", "encode", 0.02), pool("s0", "sample", s), pool("dec", "decode", 0.02)]},
          open(d + "/cluster.json", "w"), indent=2)
PY
batch() {  # batch PREFIX -> JSON lines of $jobs jobs
  for i in $(seq 0 $((jobs - 1))); do
    printf '{"jobId":"%s%02d","prompt":"clip %d","width":64,"height":64,"frames":9,"fps":12,"seed":%d}\n' "$1" "$i" "$i" "$i"
  done
}
$cli start >/dev/null 2>&1 || { echo "start failed" >&2; cat "$work/state/logs/supervisor.log" >&2 || true; exit 1; }
# One phase: every user's batch (as that user, or all as one user with ONE=1), waited for.
phase() {  # phase NAME ONE -> prints the run ids, one per user
  local runs=() u
  for u in $(seq 1 "$users"); do
    batch "$1u$u" > "$work/$1u$u.jsonl"
    local who="user$u"
    [[ $2 == 1 ]] && who=fcfs
    runs+=("$($cli run "$work/$1u$u.jsonl" --background --user "$who" 2>/dev/null | tail -1)")
    sleep "$stagger"
  done
  for r in "${runs[@]}"; do $cli wait "$r" --timeout 600 >/dev/null; done
  echo "${runs[*]}"
}
fair_runs=$(phase fair 0)
fcfs_runs=$(phase fcfs 1)
# Stage times learned from a run the planner is not asked about (the first come first served one).
$cli profile learn "${fcfs_runs%% *}" -o "$work/learned.json" >/dev/null
/usr/bin/python3 - "$work/state/outputs" "$fair_runs" "$fcfs_runs" "$bin" "$work/learned.json" <<'PY'
import json, math, os, subprocess, sys
out, fair, fcfs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
bin_, learned = sys.argv[4], sys.argv[5]
def stages(run):
    res = []
    for f in os.listdir(os.path.join(out, run)):
        if f.endswith(".pipeline.json"):
            r = json.load(open(os.path.join(out, run, f)))
            res.append({s["stage"]: (float(s["startUnixMs"]) / 1000, float(s["endUnixMs"]) / 1000)
                        for s in r["stages"]})
    return res
def receipts(run):
    return [json.load(open(os.path.join(out, run, f))) for f in os.listdir(os.path.join(out, run))
            if f.endswith(".pipeline.json")]
def p95(v):  # nearest rank, as the planner's plan_mix.h
    v = sorted(v)
    return v[max(1, math.ceil(0.95 * len(v))) - 1]
def plan_vs_live(runs):  # per user: (live p95, planned p95) of the job latency
    users = {}
    for u, run in enumerate(runs, 1):
        rs = receipts(run)
        enc = [next(s for s in r["stages"] if s["stage"] == "STAGE_ENCODE") for r in rs]
        submitted = min(float(s["startUnixMs"]) / 1000 - float(s.get("queueWaitS", 0)) for s in enc)
        users[f"user{u}"] = (submitted, [float(r["endToEndS"]) for r in rs])
    t0 = min(s for s, _ in users.values())
    mix = ",".join(f"{u}:{len(l)}@{s - t0:.3f}" for u, (s, l) in users.items())
    p = subprocess.run([bin_, "--config", learned, "plan", "--mix", mix, "--json"],
                       capture_output=True, text=True, check=True)
    planned = json.loads(p.stdout)["latency"]["by_user"]
    return mix, {u: (p95(l), planned[u]["p95_s"]) for u, (_, l) in users.items()}
def makespan(runs):
    js = [j for r in runs for j in stages(r)]
    return max(j["STAGE_DECODE"][1] for j in js) - min(j["STAGE_ENCODE"][0] for j in js)
def jain_of(runs):  # (index, per-user pool-seconds, contended seconds) of one phase's runs
    per_user = [[j["STAGE_SAMPLE"] for j in stages(r)] for r in runs]
    t0 = min(s for u in per_user for s, e in u)
    t1 = min(max(s for s, e in u) for u in per_user)  # the first user's last sample start
    x = [sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in u) for u in per_user]
    j = sum(x) ** 2 / (len(x) * sum(v * v for v in x)) if sum(x) > 0 else 0.0
    return j, x, t1 - t0, per_user
jain, x, contended, per_user = jain_of(fair)
jain_fcfs = jain_of(fcfs)[0]  # the same batches as one user: first come, first served
m_fair, m_fcfs = makespan(fair), makespan(fcfs)
ratio = m_fair / m_fcfs
print(f"fair share: Jain's index of pool-seconds {jain:.4f} over {contended:.1f} s contended "
      f"(per user: {', '.join(f'{v:.1f}' for v in x)} s; goal >= 0.99); first come first "
      f"served on the same batches: {jain_fcfs:.4f}")
print(f"makespan: fair share {m_fair:.2f} s, first come first served {m_fcfs:.2f} s, "
      f"ratio {ratio:.4f} (goal within 1 %)")
mix, pvl = plan_vs_live(fair)
worst = max(abs(pl / lv - 1) for lv, pl in pvl.values())
print(f"planner (plan --mix {mix}, profiles learned from {fcfs[0]}): per-user p95 job latency "
      + "; ".join(f"{u} live {lv:.2f} s, planned {pl:.2f} s, ratio {pl / lv:.3f}"
                  for u, (lv, pl) in pvl.items())
      + f" (worst {worst * 100:.1f} % off; goal within 5 %)")
print(json.dumps({"bench": "fairness", "users": len(fair), "jobs_per_user": len(per_user[0]),
                  "jain": round(jain, 4), "jain_fcfs": round(jain_fcfs, 4), "contended_s": round(contended, 2),
                  "pool_seconds": [round(v, 2) for v in x], "makespan_fair_s": round(m_fair, 3),
                  "makespan_fcfs_s": round(m_fcfs, 3), "makespan_ratio": round(ratio, 4),
                  "p95_live_s": {u: round(lv, 3) for u, (lv, _) in pvl.items()},
                  "p95_planned_s": {u: round(pl, 3) for u, (_, pl) in pvl.items()},
                  "p95_worst_off": round(worst, 4),
                  "ok": jain >= 0.99 and abs(ratio - 1) <= 0.01 and worst <= 0.05}))
PY
