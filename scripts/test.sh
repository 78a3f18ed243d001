#!/usr/bin/env bash
# All tests: set up (every package + every target, tests included), the libFuzzer targets
# (build-fuzz, clang), then ctest over every label.  A failed build, fuzz build included, fails.
# Optional: H3PIPE_TEST_LABELS="unit|redis" to run a subset; H3PIPE_CONTAINER_TESTS=1 (.ci/run sets
# it) also runs deploy_container (images built with podman, one and two hosts through compose);
# H3PIPE_CUDA=ON builds the CUDA kernels without a GPU (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ -f fuzz/CMakeLists.txt ]]; then
  scripts/setup.sh --fuzz
fi
labels=${H3PIPE_TEST_LABELS:-}
args=(--test-dir build --output-on-failure -j2 --timeout 600)
[[ -n $labels ]] && args+=(-L "$labels")
t=$SECONDS
rc=0
ctest "${args[@]}" || rc=$?
echo "test.sh: ctest exit $rc ($((SECONDS - t)) s)"
exit $rc
