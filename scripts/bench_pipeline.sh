#!/usr/bin/env bash
# scripts/bench.sh pipeline [N]: N jobs (default 20) through the local stack with sim stage times
# encode 20 ms, sample 200 ms, decode 40 ms.  makespan_ratio = measured makespan (submission to the
# last receipt) / ideal pipelined bound (first job's full path + (N-1) x the bottleneck stage);
# target 1.01.  Then `h3pipe report RUN --json` of the run (issue #24): every per-job field is
# checked present (report_fields_missing), the sampler's duty cycle (target 0.97), the steady
# rate beside the planner's, the mean real-time factor.
# H3PIPE_BUILD=DIR runs the binaries of another build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
b=${H3PIPE_BUILD:-build}
dir=$(mktemp -d)
trap '"$b"/bin/h3pipe --config "$dir/c.json" stop >/dev/null 2>&1 || true; [[ -n ${KEEP:-} ]] || rm -rf "$dir"' EXIT
cat >"$dir/c.json" <<JSON
{"name": "bench", "state_dir": "$dir/state",
 "queue": {"lease_ms": 3000, "renew_ms": 500, "sweep_ms": 500, "block_ms": 100},
 "hosts": [{"name": "local"}],
 "pools": [
  {"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.02}}},
  {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 0.2}}},
  {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.04}}}]}
JSON
for i in $(seq 1 "$n"); do
  printf '{"jobId":"b%03d","prompt":"bench %d","width":64,"height":64,"frames":9,"fps":12,"seed":%d}\n' "$i" "$i" "$i"
done >"$dir/batch.jsonl"
h3="$b/bin/h3pipe --config $dir/c.json"
$h3 start >/dev/null
t0=$(date +%s%3N)
run=$($h3 run "$dir/batch.jsonl" --background 2>/dev/null | tail -n1)
$h3 wait "$run" >/dev/null
# The makespan starts when the run was submitted to Redis (created_unix_ms), not at CLI start-up.
t0=$($h3 status "$run" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["created_unix_ms"])')
# Where the time went (issue #24): the run's report, every per-job field, the sampler's duty cycle.
$h3 report "$run" --json >"$dir/report.json"
$h3 stop >/dev/null 2>&1 || true
# As root (DUTY_NETNS=0 skips it): the sampler's duty cycle with decode on another host, across two
# network namespaces (bench/pipeline/duty_netns.py: real transfers, a full queue).
duty='{}'
if [[ $(id -u) -eq 0 && ${DUTY_NETNS:-1} != 0 ]]; then
  duty=$(/usr/bin/python3 bench/pipeline/duty_netns.py --bin "$b/bin" 2>&1 | tail -n1) || true
  [[ $duty == \{* ]] || duty='{"error": "duty_netns.py gave no result"}'
fi
DUTY_JSON=$duty /usr/bin/python3 - "$dir/state/outputs/$run" "$t0" "$n" "$dir/report.json" <<'PY'
import glob, json, os, sys
out, t0, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rep = json.load(open(sys.argv[4]))
JOB = ("wait_s", "run_s", "transfer_s", "mux_s", "end_to_end_s", "video_s", "real_time_factor", "stages", "planned")
STAGE = ("wait_s", "run_s", "mux_s", "wire_s", "verify_s", "total_s")
missing = sorted({f for j in rep["job_timing"] for f in JOB if f not in j} |
                 {f for j in rep["job_timing"] for s in j["stages"] for f in STAGE if f not in s} |
                 {f for f in ("steady_rate_per_hour", "makespan_s") if f not in rep["measured"] or f not in rep.get("planned", {})})
pools = {p["name"]: p for p in rep["pools"]}
recs = [json.load(open(f)) for f in glob.glob(out + "/*.pipeline.json")]
end = max(int(s["endUnixMs"]) for r in recs for s in r["stages"])
start = min(int(s["startUnixMs"]) for r in recs for s in r["stages"])
ideal = (0.02 + 0.2 + 0.04) + (n - 1) * 0.2
mk = (end - t0) / 1000.0
s0 = pools["s0"]
print(f"report: sampler s0 duty cycle {s0['duty_cycle']:.4f} (bubbles {s0['bubble_s']}), steady {rep['measured']['steady_rate_per_hour']:.0f}/h "
      f"(plan {rep['planned']['steady_rate_per_hour']:.0f}/h), rtf mean {rep['measured']['real_time_factor_mean']:.3f}, "
      f"fields missing: {missing or 'none'}", file=sys.stderr)
print(json.dumps({"jobs": len(recs), "makespan_s": round(mk, 4), "first_stage_start_after_submit_s": round((start - t0) / 1000.0, 4),
                  "ideal_bound_s": round(ideal, 4), "makespan_ratio": round(mk / ideal, 4), "target_ratio": 1.01,
                  "sampler_duty_cycle": round(s0["duty_cycle"], 4), "duty_target": 0.97,
                  "steady_rate_per_hour": round(rep["measured"]["steady_rate_per_hour"], 1),
                  "planned_steady_rate_per_hour": round(rep["planned"]["steady_rate_per_hour"], 1),
                  "real_time_factor_mean": round(rep["measured"]["real_time_factor_mean"], 4),
                  "report_fields_missing": missing, "duty_netns": json.loads(os.environ["DUTY_JSON"])}))
PY
