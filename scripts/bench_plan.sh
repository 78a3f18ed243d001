#!/usr/bin/env bash
# Planner benchmark: plan time for 10 000 jobs on the seed topologies (target < 1 s).
# Usage: scripts/bench_plan.sh [--jobs N] [--repeat R]     (BUILD_DIR defaults to build)
# Builds only the bench target, runs it; the last line is one JSON object.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${JOBS:-2}
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j"$jobs" --target bench_plan >/dev/null
exec "$build/bench/bench_plan" "$@"
