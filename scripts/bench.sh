#!/usr/bin/env bash
# scripts/bench.sh NAME [ARGS...]: runs one benchmark; each prints one JSON object as its last line.
#   queue | pipeline | transfer | runtime | plan | chaos | fuzz | fuzz-latent
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:?usage: scripts/bench.sh queue|pipeline|transfer|runtime|plan|chaos|fuzz|fuzz-latent}
shift
[[ -x build/bin/h3pipe ]] || scripts/setup.sh
if [[ -x scripts/bench_${name//-/_}.sh ]]; then exec scripts/bench_${name//-/_}.sh "$@"; fi
bin=build/bench/bench_${name//-/_}
[[ -x $bin ]] || { echo "no benchmark named $name" >&2; exit 2; }
exec "$bin" "$@"
