#!/usr/bin/env bash
# scripts/bench.sh NAME [ARGS...]: runs one benchmark; each prints one JSON object as its last line.
#   queue | pipeline | transfer | runtime | mp4 | plan | plan-vs-run | chaos | fairness | deploy | fuzz | fuzz-latent
#   | api | api-events | build
# H3PIPE_BUILD=DIR uses the binaries of another build directory (default build).
# Each NAME first builds the targets it runs (cmake --build DIR -j2 --target ...; a no-op when they
# are current), so it works after scripts/demo.sh, which builds only the CLI and the services;
# with H3PIPE_BUILD_LOCK=FILE that build runs under `flock FILE` (a build directory shared with
# other builds).  fuzz and fuzz-latent [SECONDS] (fuzz_latent alone) build their own clang
# directory (scripts/bench_fuzz.sh); build [demo|all|both] times clean builds in a fresh directory
# of its own (scripts/bench_build.sh) and touches no build directory.
# H3PIPE_BENCH_TARGETS_ONLY=1 prints "BUILD_DIR TARGET..." and exits (tests/bench_script).
set -euo pipefail
cd "$(dirname "$0")/.."
names="queue|pipeline|transfer|runtime|mp4|plan|plan-vs-run|chaos|fairness|deploy|fuzz|fuzz-latent|api|api-events|build"
name=${1:?usage: scripts/bench.sh $names}
shift
build=${H3PIPE_BUILD:-build}
services=(h3pipe h3pipe-encoder h3pipe-sampler h3pipe-decoder h3pipe-transfer)
case $name in
  queue) targets=(bench_queue) ;;
  transfer) targets=(xfer_node bench_sha) build=${1:-$build} ;;  # bench_transfer.sh [BUILD_DIR]
  runtime) targets=(bench_runtime) build=${BUILD_DIR:-$build} ;;
  mp4) targets=(bench_mp4) ;;
  plan) targets=(bench_plan) build=${BUILD_DIR:-$build} ;;
  pipeline | plan-vs-run | chaos | fairness) targets=("${services[@]}") ;;
  deploy) targets=(h3pipe) ;;
  api) targets=("${services[@]}" h3pipe-api) ;;  # bench_api.sh [RATE [SECONDS]] (then api-events)
  api-events) targets=("${services[@]}" h3pipe-api) ;;  # bench_api_events.sh [SUBSCRIBERS [EVENTS [RATE]]]
  fuzz | fuzz-latent | build) targets=() ;;
  *)
    echo "no benchmark named $name (one of: ${names//|/, })" >&2
    exit 2
    ;;
esac
if [[ -n ${H3PIPE_BENCH_TARGETS_ONLY:-} ]]; then  # tests/bench_script: what NAME builds, where
  echo "$build ${targets[*]}"
  exit 0
fi
# build: clean builds in a fresh directory of its own, so neither setup.sh nor build/ first.
[[ $name == build ]] && exec scripts/bench_build.sh "$@"
[[ -x ${H3PIPE_BUILD:-build}/bin/h3pipe ]] || scripts/setup.sh
# (A directory not configured yet is left to the benchmark's script: runtime and plan configure it.)
if ((${#targets[@]})) && [[ -f $build/CMakeCache.txt ]]; then
  cmd=(cmake --build "$build" -j2 --target "${targets[@]}")
  [[ -n ${H3PIPE_BUILD_LOCK:-} ]] && cmd=(flock "$H3PIPE_BUILD_LOCK" "${cmd[@]}")
  echo "bench: building ${targets[*]} in $build" >&2
  if ! "${cmd[@]}" >"$build/bench-build.log" 2>&1; then
    echo "bench: building ${targets[*]} failed (whole log: $build/bench-build.log):" >&2
    grep -E "error|Error" "$build/bench-build.log" | head -20 >&2 || true
    exit 2
  fi
fi
# fuzz-latent [SECONDS]: the latent parser's fuzzer alone (it had no script and said "no benchmark").
[[ $name == fuzz-latent ]] && exec scripts/bench_fuzz.sh "${1:-60}" fuzz_latent
if [[ -x scripts/bench_${name//-/_}.sh ]]; then exec scripts/bench_${name//-/_}.sh "$@"; fi
bin=${H3PIPE_BUILD:-build}/bench/bench_${name//-/_}
[[ -x $bin ]] || { echo "no benchmark named $name" >&2; exit 2; }
exec "$bin" "$@"
