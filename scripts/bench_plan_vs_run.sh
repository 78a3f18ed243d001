#!/usr/bin/env bash
# Plan against run (issue #13): each seed topology on the local stack with the sim runtime at a
# time scale, its plan of the same jobs from `h3pipe report`.  Prints per topology the planned
# and measured makespan, their ratio, the worst per-job stage-start difference and, from the
# receipts, the stages of one GPU group that overlapped (must be 0: one lease per group), then one
# JSON line.  Usage: scripts/bench_plan_vs_run.sh [JOBS]   (H3PIPE_BUILD: build dir, default build;
# SCALE: time scale, default 0.02)
#
# Every host of a topology is folded onto this machine's one local host, links dropped: the
# dispatch policy, GPU groups (one lease per group) and the decode choice are what is compared;
# transfers between hosts are not.  As root it also runs a two-decode-host topology across two
# network namespaces (tests/chaos/plan_vs_run_netns.py: real transfers, the decode-host choice).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3PIPE_BUILD:-build}
jobs=${1:-8}
scale=${SCALE:-0.02}
bin=$build/bin/h3pipe
[[ -x $bin ]] || { echo "build first: $bin missing" >&2; exit 2; }
work=$(mktemp -d)
trap 'for c in "$work"/*/cluster.json; do [[ -f $c ]] && "$bin" --config "$c" stop >/dev/null 2>&1 || true; done; rm -rf "$work"' EXIT
results=()
for topo in two_host_4xT10_3080ti four_four_plus_one four_four_xtx_plus_one serial_4xT10; do
  d=$work/$topo
  mkdir -p "$d"
  /usr/bin/python3 - "$topo" "$d" "$scale" <<'PY'
import json, sys
topo, d, scale = sys.argv[1:4]
c = json.load(open(f"configs/topologies/{topo}.json"))
c["time_scale"] = float(scale)
c["hosts"] = [{"name": "local"}]
c.pop("links", None)
c["redis"] = {"embedded": True}
c["state_dir"] = d + "/state"
for p in c["pools"]:
    p["host"] = "local"
    p.pop("gpus", None)
    p.pop("metrics_port", None)
json.dump(c, open(d + "/cluster.json", "w"), indent=2)
PY
  for i in $(seq 0 $((jobs - 1))); do
    printf '{"jobId":"j%02d","prompt":"clip %d","width":128,"height":96,"frames":9,"fps":12,"seed":%d,"jobClass":"sd"}\n' "$i" "$i" "$i"
  done > "$d/batch.jsonl"
  cli="$bin --config $d/cluster.json"
  $cli start >/dev/null 2>&1 || { echo "$topo: start failed" >&2; cat "$d/state/logs/supervisor.log" >&2 || true; exit 1; }
  run=$($cli run "$d/batch.jsonl" --background 2>/dev/null)
  $cli wait "$run" --timeout 600 >/dev/null
  rep=$($cli report "$run" --json)
  $cli stop >/dev/null 2>&1 || true
  line=$(/usr/bin/python3 -c '
import glob, json, sys
r = json.loads(sys.argv[2])
p, m = r["planned"]["makespan_s"], r["measured"]["makespan_s"]
# GPU groups (shares_gpus_with, transitive): no two stages of one group may overlap in the receipts.
cfg = json.load(open(sys.argv[3] + "/cluster.json"))
lead = {q["name"]: q["name"] for q in cfg["pools"]}
def root(n):
    while lead[n] != n: n = lead[n]
    return n
for q in cfg["pools"]:
    if q.get("shares_gpus_with") in lead: lead[root(q["name"])] = root(q["shares_gpus_with"])
busy = {}
for f in glob.glob(sys.argv[3] + "/state/outputs/" + sys.argv[4] + "/*.pipeline.json"):
    for st in json.load(open(f))["stages"]:
        if st.get("pool") in lead:
            busy.setdefault(root(st["pool"]), []).append((int(st["startUnixMs"]), int(st["endUnixMs"])))
overlaps = 0
for iv in busy.values():
    iv.sort()
    overlaps += sum(1 for a, b in zip(iv, iv[1:]) if b[0] < a[1])
shared = sum(1 for q in cfg["pools"] if q.get("shares_gpus_with"))
print(json.dumps({"topology": sys.argv[1], "jobs": r["jobs"], "planned_s": round(p, 3), "measured_s": round(m, 3),
                  "ratio": round(m / p, 4), "worst_start_delta_s": round(r["worst_start_delta_s"], 3),
                  "worst_start_error": round(r["worst_start_error"], 4), "worst_start_at": r["worst_start_at"],
                  "assignment_differences": r["assignment_differences"],
                  "pools_sharing_gpus": shared, "gpu_group_stages": sum(len(v) for g, v in busy.items() if sum(1 for q in lead if root(q) == g) > 1),
                  "gpu_group_overlaps": overlaps}))
' "$topo" "$rep" "$d" "$run")
  echo "$line"
  results+=("$line")
done
# The two-decode-host topology across two network namespaces (root only; tests/chaos/plan_vs_run_netns.py).
netns=null
if [[ $(id -u) -eq 0 ]]; then
  netns=$(/usr/bin/python3 tests/chaos/plan_vs_run_netns.py --bin "$build/bin" --jobs 12 2>/dev/null | tail -1 || true)
  [[ $netns == \{* ]] || netns=null
  echo "$netns"
fi
/usr/bin/python3 -c '
import json, sys
rows = [json.loads(x) for x in sys.argv[3:]]
netns = json.loads(sys.argv[2])
print(json.dumps({"bench": "plan-vs-run", "time_scale": float(sys.argv[1]), "topologies": rows,
                  "worst_makespan_error": round(max(abs(r["ratio"] - 1) for r in rows), 4),
                  "worst_start_error": max(r["worst_start_error"] for r in rows),
                  "gpu_group_overlaps": sum(r["gpu_group_overlaps"] for r in rows), "netns_two_decode_hosts": netns}))
' "$scale" "$netns" "${results[@]}"
