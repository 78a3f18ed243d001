#!/usr/bin/env bash
# scripts/bench.sh api-events [SUBSCRIBERS [EVENTS [RATE]]]: the event delay of h3pipe-api's
# Server-Sent Events with 1,000 subscribers of one run (issue #37 goal: p99 <= 50 ms on the 2-core
# machine) beside the same subscribers reading the run's stream with raw Redis XREAD
# (bench/api/events.mjs).  Starts a private local stack (sim runtime) in a temp dir and stops it.
# The last line is one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3PIPE_BUILD:-build}
bin=$build/bin
dir=$(mktemp -d /tmp/h3bench-events.XXXXXX)
cat >"$dir/cluster.json" <<JSON
{"name": "bench-api-events", "state_dir": "$dir",
 "classes": [{"name": "slow", "width": 128, "height": 96, "frames": 9, "steps": 6}],
 "hosts": [{"name": "local"}],
 "pools": [{"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
           {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 3600}}},
           {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]}
JSON
h3() { "$bin/h3pipe" --config "$dir/cluster.json" "$@"; }
trap 'h3 stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
h3 start >&2
token=$(h3 token create bench --role admin 2>/dev/null | tail -1)
port=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['health_port'])" "$dir/run/api-local.json")
run=$(curl -sf "http://127.0.0.1:$port/v1/videos" -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' -d '{"prompt": "bench", "model": "slow"}' |
  python3 -c "import json,sys; print(json.load(sys.stdin)['run_id'])")
read -r rhost rport < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['redis']; print(r['host'], r.get('port', 0))" "$dir/stack.json")
API_PORT=$port TOKEN=$token RUN=$run REDIS_HOST=$rhost REDIS_PORT=$rport REDIS_USER=redis-admin \
  REDIS_PASSWORD=$(cat "$dir/secrets/redis-admin.password") SUBSCRIBERS=${1:-1000} EVENTS=${2:-200} \
  RATE=${3:-20} node bench/api/events.mjs
