#!/usr/bin/env bash
# scripts/bench.sh deploy: the container test (tests/deploy/deploy_container.py): builds every image
# with podman (scripts/images.sh; the first build takes 15-20 min on 2 cores, a source change about
# 7 min), then one host and two hosts through compose on podman's socket.  Needs root, podman,
# debootstrap and runc; not part of .ci/run (it does not fit CI's budget).  The last line is
# ctest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${H3PIPE_BUILD:-build}
H3PIPE_CONTAINER_TESTS=1 exec ctest --test-dir "$build" -L container --output-on-failure
