#!/usr/bin/env bash
# Installs what h3pipe needs from Debian's packages (idempotent, quiet when all is there)
# and builds Release into build/.  Usage: scripts/setup.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config clang libclang-rt-14-dev
  libzmq3-dev cppzmq-dev libhiredis-dev libprotobuf-dev protobuf-compiler libssl-dev
  prometheus-cpp-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libopenblas-dev libcurl4-openssl-dev
  libcpp-httplib-dev
  redis-server redis-tools stunnel4 ffmpeg iproute2 iperf3 openssh-client openssh-server
  python3-numpy python3-yaml python3-torch prometheus docker-compose procps
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
)
# npm for tests/deploy's Kubernetes schemas; a node/npm from elsewhere (nodesource) is kept.
command -v npm >/dev/null 2>&1 || packages+=(npm)

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

# kubernetes-models (the Kubernetes OpenAPI schemas) for ctest's deploy_helm_schemas, into the
# ignored tests/deploy/node_modules; without the registry that test skips and says why.
if [[ ! -d tests/deploy/node_modules/kubernetes-models ]]; then
  timeout 300 npm ci --prefix tests/deploy --no-audit --no-fund --omit=dev >/dev/null 2>&1 ||
    echo "setup: npm could not install kubernetes-models (no registry?); deploy_helm_schemas will skip" >&2
fi

[[ ${1:-} == --no-build ]] && exit 0
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
