#!/usr/bin/env bash
# The main job: set up (the build and run packages, then only the CLI, the four services and
# h3pipe-api; CUDA kernels only with a GPU or H3PIPE_CUDA=ON), start the local stack (private
# Redis + every service + the HTTP API on loopback, embedded default config), run
# examples/batch.jsonl with progress, print the MP4s, receipts and the API's URL, stop.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
scripts/setup.sh --demo
setup_s=$((SECONDS - t0))
export H3PIPE_STATE=${H3PIPE_STATE:-$PWD/.state/demo}
h3=build/bin/h3pipe
$h3 stop >/dev/null 2>&1 || true
$h3 start
trap '$h3 stop >/dev/null 2>&1 || true' EXIT
t1=$SECONDS
run_id=$($h3 run examples/batch.jsonl --background | tail -n1)
rc=0
$h3 wait "$run_id" || rc=$?
echo
echo "outputs of run $run_id:"
for f in "$H3PIPE_STATE"/outputs/"$run_id"/*.mp4; do
  echo "  $f"
  echo "  ${f%.mp4}.pipeline.json"
done
api_url=$($h3 status 2>/dev/null | sed -n 's/^api  //p' || true)
[[ -n $api_url ]] && echo "the HTTP API was at $api_url (docs/api.md; h3pipe token create NAME --role submit)"
echo "demo: set-up ${setup_s} s, the batch $((SECONDS - t1)) s, in all $((SECONDS - t0)) s"
exit $rc
