#!/usr/bin/env bash
# scripts/bench.sh chaos [JOBS] [KILLS] [REDIS_KILLS]: issue #7's chaos run at full scale.
# 200 jobs (sim runtime: encode 0.1 s, sample 1.0 s on each of two sampler pools, decode 0.25 s) on
# host a (namespace A: Redis, encoder, two samplers, transfer sender) and host b (namespace B: the
# decoder and transfer receiver, over a veth pair shaped to 2.35 Gbit/s), submitted by two users
# with mixed priorities (alice two thirds at priorities 0/0/1, bob the rest at 0/2, a run each;
# issue #39: the claim order must keep exactly once; the "mix:" line says so); first the batch without
# kills (baseline), then the same batch while 50 random services and Redis twice are kill -9'd,
# then resume.  Prints every kill, and as the last line one JSON object with jobs, outputs,
# duplicates, leftovers, kills, recovery_p99_s and wall_ratio (chaos wall / baseline wall).
# Needs root.  CHAOS_SEED=N replays a kill schedule; KEEP=1 keeps the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3PIPE_BUILD:-build}
args=(--bin "$build/bin" --jobs "${1:-200}" --kills "${2:-50}" --redis-kills "${3:-2}" --baseline)
[[ -n ${CHAOS_SEED:-} ]] && args+=(--seed "$CHAOS_SEED")
[[ -n ${KEEP:-} ]] && args+=(--keep)
exec /usr/bin/python3 tests/chaos/chaos.py "${args[@]}"
