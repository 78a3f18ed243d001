#!/usr/bin/env bash
# scripts/bench.sh pipeline [N]: N jobs (default 20) through the local stack with sim stage times
# encode 20 ms, sample 200 ms, decode 40 ms.  makespan_ratio = measured makespan (submission to the
# last receipt) / ideal pipelined bound (first job's full path + (N-1) x the bottleneck stage).
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
/usr/bin/python3 - "$dir/state/outputs/$run" "$t0" "$n" <<'PY'
import glob, json, sys
out, t0, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
recs = [json.load(open(f)) for f in glob.glob(out + "/*.pipeline.json")]
end = max(int(s["endUnixMs"]) for r in recs for s in r["stages"])
start = min(int(s["startUnixMs"]) for r in recs for s in r["stages"])
ideal = (0.02 + 0.2 + 0.04) + (n - 1) * 0.2
mk = (end - t0) / 1000.0
print(json.dumps({"jobs": len(recs), "makespan_s": round(mk, 4), "first_stage_start_after_submit_s": round((start - t0) / 1000.0, 4),
                  "ideal_bound_s": round(ideal, 4), "makespan_ratio": round(mk / ideal, 4), "target_ratio": 1.02}))
PY
