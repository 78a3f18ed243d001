#!/usr/bin/env bash
# All tests: set up (every package + every target, tests included), the libFuzzer targets
# (build-fuzz, clang), then ctest over every label.  A failed build, fuzz build included, fails.
# Ends with the skipped tests and their reasons (CI=true: a reason not in tests/skip_allowlist.txt
# fails).  Optional: H3PIPE_TEST_LABELS="unit|redis" or H3PIPE_TEST_REGEX (ctest -R) to run a
# subset; H3PIPE_CONTAINER_TESTS=1 (.ci/run sets it) also runs deploy_container (images built with
# podman, one and two hosts through compose);
# H3PIPE_CUDA=ON builds the CUDA kernels without a GPU (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [[ -f fuzz/CMakeLists.txt ]]; then
  scripts/setup.sh --fuzz
fi
labels=${H3PIPE_TEST_LABELS:-}
# Skips: every ctest skip (SKIP_RETURN_CODE 77; a GTEST_SKIP is one, tests/support/gtest_main.cpp)
# is listed with its reason after ctest's summary (scripts/skips.py reads ctest's JUnit file);
# under CI=true a skip whose reason tests/skip_allowlist.txt does not allow fails the run.
junit=$PWD/build/Testing/ctest-junit.xml
args=(--test-dir build --output-on-failure -j2 --timeout 600 --output-junit "$junit")
[[ -n $labels ]] && args+=(-L "$labels")
[[ -n ${H3PIPE_TEST_REGEX:-} ]] && args+=(-R "$H3PIPE_TEST_REGEX")
t=$SECONDS
rc=0
mkdir -p build/Testing
rm -f "$junit"
ctest "${args[@]}" | tee build/Testing/ctest-output.txt || rc=$?  # pipefail: ctest's status
skips_rc=0
strict=()
[[ ${CI:-} == true ]] && strict=(--strict)
if [[ -f $junit ]]; then
  /usr/bin/python3 scripts/skips.py "$junit" --allowlist tests/skip_allowlist.txt "${strict[@]}" ||
    skips_rc=$?
else
  echo "skips: ctest wrote no $junit: the skips cannot be listed"
  [[ ${CI:-} == true ]] && skips_rc=1
fi
# The run still ends with ctest's summary line, then test.sh's own.
grep -E '^[0-9]+% tests passed' build/Testing/ctest-output.txt | tail -1 || true
if ((rc == 0 && skips_rc != 0)); then
  echo "test.sh: ctest exit 0, but skips not allowed under CI=true: exit 1 ($((SECONDS - t)) s)"
  exit 1
fi
echo "test.sh: ctest exit $rc ($((SECONDS - t)) s)"
exit $rc
