#!/usr/bin/env bash
# All tests: set up (packages + Release build), then ctest over every label.
# Optional: H3PIPE_TEST_LABELS="unit|redis" to run a subset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# libFuzzer targets need clang; built in their own dir so the main build stays on gcc.
if command -v clang++ >/dev/null && [[ -f fuzz/CMakeLists.txt ]]; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH3PIPE_FUZZ=ON -DH3PIPE_CUDA=OFF \
    -DH3PIPE_TESTS=OFF -Wno-dev >/dev/null && cmake --build build-fuzz -j"$(nproc)" --target fuzz_latent fuzz_spec fuzz_config fuzz_transfer >/dev/null 2>&1 \
    || echo "test.sh: fuzz build failed; fuzz tests will skip" >&2
fi
labels=${H3PIPE_TEST_LABELS:-}
args=(--test-dir build --output-on-failure -j2 --timeout 600)
[[ -n $labels ]] && args+=(-L "$labels")
ctest "${args[@]}"
