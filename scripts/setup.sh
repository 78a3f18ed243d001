#!/usr/bin/env bash
# Installs what h3pipe needs from Debian's packages (idempotent, quiet when all is there)
# and builds Release into build/.  Usage: scripts/setup.sh [--no-build | --build-only]
#   (no flag)     every package (build, tests, benches, the deploy tests' tools), kubernetes-models
#                 from npm, then the Release build: what CI and a developer machine use
#   --no-build    the same installs, no build
#   --build-only  only what compiling the binaries needs (cmake -DH3PIPE_TESTS=OFF: no test
#                 libraries, no test tools, no npm), no build: docker/Dockerfile's build stage
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case $mode in
  "" | --no-build | --build-only) ;;
  *) echo "setup: unknown argument '$mode' (usage: scripts/setup.sh [--no-build | --build-only])" >&2; exit 2 ;;
esac

# What the compile of every binary needs (cmake/H3pipeDeps.cmake's find_package and pkg-config
# modules, and the compilers).
build_packages=(
  build-essential cmake pkg-config
  libzmq3-dev cppzmq-dev libhiredis-dev libprotobuf-dev protobuf-compiler libssl-dev
  prometheus-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libopenblas-dev libcurl4-openssl-dev
  libcpp-httplib-dev
)
# The tests, benches and fuzzers on top (clang: the fuzz targets and sanitizers; curl and openssl:
# the chart's CURVE key hook test).
test_packages=(
  clang libclang-rt-14-dev libgtest-dev libgmock-dev
  redis-server redis-tools stunnel4 ffmpeg iproute2 iperf3 openssh-client openssh-server
  python3-numpy python3-yaml python3-torch prometheus docker-compose procps curl openssl
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
)
packages=("${build_packages[@]}")
if [[ $mode != --build-only ]]; then
  packages+=("${test_packages[@]}")
  # npm for tests/deploy's Kubernetes schemas; a node/npm from elsewhere (nodesource) is kept.
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [[ $(id -u) -eq 0 ]] || sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The packaged redis-server and prometheus start system-wide daemons on install; h3pipe
  # starts its own on free ports, so stop those quietly where a service manager exists.
  for svc in redis-server prometheus; do
    $sudo_cmd service "$svc" stop >/dev/null 2>&1 || true
  done
fi

[[ $mode == --build-only ]] && exit 0

# kubernetes-models (the Kubernetes OpenAPI schemas) for ctest's deploy_helm_schemas, into the
# ignored tests/deploy/node_modules; without the registry that test skips and says why.
if [[ ! -d tests/deploy/node_modules/kubernetes-models ]]; then
  timeout 300 npm ci --prefix tests/deploy --no-audit --no-fund --omit=dev >/dev/null 2>&1 ||
    echo "setup: npm could not install kubernetes-models (no registry?); deploy_helm_schemas will skip" >&2
fi

[[ $mode == --no-build ]] && exit 0
jobs=$(nproc)
# The CUDA toolkit (nvcc on PATH or /usr/local/cuda) turns on the builtin model's CUDA backend
# (CMake's H3PIPE_CUDA defaults to ON when it finds nvcc); without it the build is CPU-only.
cuda=()
for nvcc in "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
  if [[ -n $nvcc && -x $nvcc ]]; then cuda=(-DCMAKE_CUDA_COMPILER="$nvcc"); break; fi
done
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" -Wno-dev >/dev/null
cmake --build build -j"$jobs" 2>&1 | grep -E 'error|warning: unused|FAILED' || true
test "${PIPESTATUS[0]}" -eq 0
