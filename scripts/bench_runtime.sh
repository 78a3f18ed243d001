#!/usr/bin/env bash
# Builtin runtime benchmark (bench/runtime): per-stage seconds for one clip at the default model
# size, and the sampler's / decoder's GFLOP/s as a fraction of this CPU's sgemm peak measured in
# the same run.  Last line of stdout: one JSON object.
#
#   scripts/bench_runtime.sh                      # 416x736 x 124 frames @ 24 fps, 6 steps
#   scripts/bench_runtime.sh --width 256 --height 256 --frames 49 --steps 2   # quick
#   BUILD_DIR=build-x JOBS=2 scripts/bench_runtime.sh --settings '{"threads": 4}'
#   scripts/bench_runtime.sh --device cuda        # device backend: default and large model, bf16
#                                                 # GEMM peak and MFU, NVML, sampled CPU ratio
#                                                 # (docs/model.md "Device backend"; needs a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${JOBS:-2}
if [[ ! -x $build/bench/bench_runtime || ${REBUILD:-1} == 1 ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -Wno-dev >/dev/null
  cmake --build "$build" -j"$jobs" --target bench_runtime >/dev/null
fi
exec "$build/bench/bench_runtime" --width 736 --height 416 --frames 124 --fps 24 --steps 6 "$@"
