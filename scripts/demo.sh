#!/usr/bin/env bash
# The main job: set up (the build and run packages, then only the CLI and the four services;
# CUDA kernels only with a GPU or H3PIPE_CUDA=ON), start the local stack (private Redis + every
# service, embedded default config), run examples/batch.jsonl with progress, print the MP4s and
# receipts, stop.
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
echo "demo: set-up ${setup_s} s, the batch $((SECONDS - t1)) s, in all $((SECONDS - t0)) s"
exit $rc
