#!/usr/bin/env bash
# The main job: set up if needed, start the local stack (private Redis + every service, embedded
# default config), run examples/batch.jsonl with progress, print the MP4s and receipts, stop.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/bin/h3pipe ]] || scripts/setup.sh
export H3PIPE_STATE=${H3PIPE_STATE:-$PWD/.state/demo}
h3=build/bin/h3pipe
$h3 stop >/dev/null 2>&1 || true
$h3 start
trap '$h3 stop >/dev/null 2>&1 || true' EXIT
run_id=$($h3 run examples/batch.jsonl --background | tail -n1)
rc=0
$h3 wait "$run_id" || rc=$?
echo
echo "outputs of run $run_id:"
for f in "$H3PIPE_STATE"/outputs/"$run_id"/*.mp4; do
  echo "  $f"
  echo "  ${f%.mp4}.pipeline.json"
done
exit $rc
