#!/usr/bin/env bash
# scripts/bench.sh api [RATE [SECONDS]]: h3pipe-api's GET p99 and POST p99 at RATE requests/s
# (default 500, 10 s each) on loopback, beside the same work with raw Redis (HGETALL / XADD);
# HTTP over kept-alive connections as the SDKs use them (KEEPALIVE=0: a connection per request);
# goals on the 2-core machine: GET p99 <= 2 ms, POST p99 <= 5 ms (issue #37; bench/api/requests.mjs),
# timed with node:http (as the SDKs) and with a minimal keep-alive client (as the Redis side).
# Then, unless H3PIPE_BENCH_API_EVENTS=0, the SSE event delay (scripts/bench_api_events.sh).
# Starts a private local stack (sim runtime; jobs of class slow wait in sampling) in a temp dir and
# stops it.  Between GET and POST, the cancel delay (#37 item 5) from the HTTP side: DELETE of
# the running video -> the sample pool's next claim.  The last line is one JSON object:
# {"requests": ..., "events": ...}.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3PIPE_BUILD:-build}
bin=$build/bin
dir=$(mktemp -d /tmp/h3bench-api.XXXXXX)
cat >"$dir/cluster.json" <<JSON
{"name": "bench-api", "state_dir": "$dir",
 "classes": [{"name": "slow", "width": 128, "height": 96, "frames": 9, "steps": 6}],
 "hosts": [{"name": "local"}],
 "pools": [{"name": "enc", "host": "local", "stage": "encode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}},
           {"name": "s0", "host": "local", "stage": "sample", "profiles": {"default": {"kind": "fixed", "seconds": 3600}}},
           {"name": "dec", "host": "local", "stage": "decode", "profiles": {"default": {"kind": "fixed", "seconds": 0.01}}}]}
JSON
h3() { "$bin/h3pipe" --config "$dir/cluster.json" "$@"; }
trap 'h3 stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
h3 start >&2
token=$(h3 token create bench --role admin 2>/dev/null | tail -1)  # admin: no rate limit
port=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['health_port'])" "$dir/run/api-local.json")
video=$(curl -sf "http://127.0.0.1:$port/v1/videos" -H "Authorization: Bearer $token" \
  -H 'Content-Type: application/json' -d '{"prompt": "bench", "model": "slow"}' |
  python3 -c "import json,sys; print(json.load(sys.stdin)['id'])")
read -r rhost rport < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['redis']; print(r['host'], r.get('port', 0))" "$dir/stack.json")
requests=$(API_PORT=$port TOKEN=$token VIDEO=$video REDIS_HOST=$rhost REDIS_PORT=$rport REDIS_USER=redis-admin \
  REDIS_PASSWORD=$(cat "$dir/secrets/redis-admin.password") RATE=${1:-500} SECONDS=${2:-10} \
  node bench/api/requests.mjs | tail -1)
echo "$requests" | python3 -c "
import json, sys
r = json.load(sys.stdin)
for k in ('get_video', 'get_video_raw', 'redis_hgetall', 'post_video', 'post_video_raw', 'redis_xadd'):
    s = r.get(k)
    if not s: continue
    print(f\"{k:14} p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:7.2f} ms  max {s['max_ms']:7.2f} ms  ({s['delivered']}/{s['expected']}, {s['failed']} failed)\")
print(f\"GET p99 / goal 2 ms: {r['get_p99_over_goal']}  POST p99 / goal 5 ms: {r['post_p99_over_goal']}  \"
      f\"GET/HGETALL p99: {r['get_p99_over_redis']}  POST/XADD p99: {r['post_p99_over_redis']}  \"
      f\"(HTTP keep-alive: {r.get('http_keep_alive')})\")
if r.get('get_video_raw'):
    print(f\"minimal keep-alive HTTP client (as the Redis side's): GET p99 / goal 2 ms: {r['get_video_raw']['p99_ms'] / 2:.2f}  \"
          f\"POST p99 / goal 5 ms: {r['post_video_raw']['p99_ms'] / 5:.2f}  met: {r.get('met_raw_client')}\")
c = r.get('cancel') or {}
print(f\"cancel: DELETE of the running video -> the sample pool's next claim {c.get('to_next_claim_ms')} ms \"
      f\"(goal {c.get('goal_ms')} ms = the sim's 50 ms cancel check + 1 s; ratio {r.get('cancel_over_goal')}; \"
      f\"DELETE answered in {c.get('delete_reply_ms')} ms, status {c.get('delete_status')})\")
" >&2
events=null
if [[ ${H3PIPE_BENCH_API_EVENTS:-1} != 0 && -x scripts/bench_api_events.sh ]]; then
  h3 stop >/dev/null 2>&1 || true
  events=$(scripts/bench_api_events.sh | tail -1)
fi
echo "{\"requests\": $requests, \"events\": $events}"
