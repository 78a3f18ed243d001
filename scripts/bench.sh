#!/usr/bin/env bash
# scripts/bench.sh NAME [ARGS...]: runs one benchmark; each prints one JSON object as its last line.
#   queue | pipeline | transfer | runtime | mp4 | plan | plan-vs-run | chaos | deploy | fuzz | fuzz-latent
# H3PIPE_BUILD=DIR uses the binaries of another build directory (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/bench.sh queue|pipeline|transfer|runtime|mp4|plan|plan-vs-run|chaos|deploy|fuzz|fuzz-latent}
shift
[[ -x ${H3PIPE_BUILD:-build}/bin/h3pipe ]] || scripts/setup.sh
if [[ -x scripts/bench_${name//-/_}.sh ]]; then exec scripts/bench_${name//-/_}.sh "$@"; fi
bin=${H3PIPE_BUILD:-build}/bench/bench_${name//-/_}
[[ -x $bin ]] || { echo "no benchmark named $name" >&2; exit 2; }
exec "$bin" "$@"
