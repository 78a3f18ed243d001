#!/usr/bin/env bash
# Installs what h3pipe needs from Debian's packages (idempotent) and builds Release into build/.
#
#   scripts/setup.sh [--demo | --no-build | --build-only | --fuzz]
#     (no flag)     every package (build, run, tests, benches, the container test's tools),
#                   kubernetes-models from npm, then every target (tests too): scripts/test.sh, CI
#     --demo        the build and run packages only, then only what scripts/demo.sh runs: the CLI,
#                   the four services and h3pipe-api (and the libraries they link)
#     --no-build    the installs of the no-flag mode, no build
#     --build-only  only what compiling the binaries needs, no build (docker/Dockerfile's build
#                   stage: cmake -DH3PIPE_TESTS=OFF there, no test libraries, no test tools, no npm)
#     --fuzz        the libFuzzer targets (fuzz/*) with clang into build-fuzz (scripts/test.sh)
#
# CUDA: the builtin model's kernels are built when nvcc is there (PATH or /usr/local/cuda) and a
# GPU is visible (`nvidia-smi -L` succeeds, or /dev/nvidia0 exists).  H3PIPE_CUDA=ON builds them
# without a GPU (a compile check; fails without nvcc), H3PIPE_CUDA=OFF never.
# Output: one line per phase with its time; warnings and errors only when there are some (the
# whole build log is build/setup-build.log); a progress line during the build.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case $mode in
  "" | --demo | --no-build | --build-only | --fuzz) ;;
  *) echo "setup: unknown argument '$mode' (usage: scripts/setup.sh [--demo | --no-build | --build-only | --fuzz])" >&2; exit 2 ;;
esac

# --- package lists: the one place they are kept (docker/Dockerfile runs --build-only) ----------
# What the compile of every binary needs (cmake/H3pipeDeps.cmake's find_package and pkg-config
# modules, the compilers, and ninja for the build).
build_packages=(
  build-essential cmake pkg-config ninja-build
  libzmq3-dev cppzmq-dev libhiredis-dev libprotobuf-dev protobuf-compiler libssl-dev
  prometheus-cpp-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcli11-dev
  libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libopenblas-dev libcurl4-openssl-dev
  libavfilter-dev
  libcpp-httplib-dev
)
# What the local stack runs besides h3pipe's binaries (the embedded default's private Redis).
run_packages=(
  redis-server
)
# The tests, benches and fuzzers on top (clang: the fuzz targets and sanitizers; curl and openssl:
# the chart's CURVE key hook test; strace: the transfer receiver's fsync order test; clang-format:
# format_check; jq: the two-host block of docs/deploy.md, run by two_host_docs; systemd: its
# systemd-analyze checks the units of `h3pipe systemd units`, deploy_systemd_units; not as init;
# lld: the linker of the ~135 links of a build, cmake/H3pipeBuildTime.cmake; gold otherwise).
test_packages=(
  clang clang-format libclang-rt-14-dev libgtest-dev libgmock-dev lld
  redis-tools redis-sentinel stunnel4 ffmpeg iproute2 iperf3 openssh-client openssh-server jq
  python3-numpy python3-yaml python3-torch prometheus procps curl openssl strace systemd
  golang-go golang-github-masterminds-sprig-dev golang-k8s-sigs-yaml-dev
  chromium universal-ctags
)
# The container test (tests/deploy/deploy_container.py, ctest -L container) and scripts/images.sh:
# rootful podman (its `podman build` is what images.sh uses; no buildah CLI needed), runc (crun
# refuses the hybrid cgroups of some VMs), catatonit (compose.yaml's `init: true`), netavark with
# aardvark-dns (podman 4's network backend and its DNS: compose services reach each other by name;
# named here, because without recommended packages apt satisfies podman's network stack with CNI,
# which resolves names only with the dnsname plugin), iptables (netavark's firewall),
# debootstrap (the base images), docker-compose (run against podman's Docker-compatible socket).
container_packages=(
  podman runc catatonit netavark aardvark-dns iptables debootstrap docker-compose
)

now() { echo "${EPOCHREALTIME/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }
tty=0
[[ -t 1 ]] && tty=1

packages=("${build_packages[@]}")
case $mode in
  --demo) packages+=("${run_packages[@]}") ;;
  --build-only) ;;
  *)
    packages+=("${run_packages[@]}" "${test_packages[@]}" "${container_packages[@]}")
    # npm for tests/deploy's Kubernetes schemas; a node/npm from elsewhere (nodesource) is kept.
    command -v npm >/dev/null 2>&1 || packages+=(npm)
    ;;
esac

# --- packages ------------------------------------------------------------------------------------
t=$(now)
missing=()
while read -r p status; do
  [[ $status == installed ]] || missing+=("$p")
done < <(for p in "${packages[@]}"; do
           s=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
           echo "$p ${s:-not-installed}"
         done)
if ((${#missing[@]})); then
  echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  apt_log=$(mktemp /tmp/h3pipe-setup-apt.XXXXXX)
  if ! { "${sudo_cmd[@]}" apt-get update -qq &&
         "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; } >"$apt_log" 2>&1; then
    grep -E '^(E|W):' "$apt_log" >&2 || tail -n 20 "$apt_log" >&2
    echo "setup: apt-get failed (log $apt_log)" >&2
    exit 1
  fi
  grep -E '^E:' "$apt_log" >&2 || true
  rm -f "$apt_log"
  # The packaged redis-server and prometheus start system-wide daemons on install; h3pipe
  # starts its own on free ports, so stop those quietly where a service manager exists.
  for svc in redis-server prometheus; do
    "${sudo_cmd[@]}" service "$svc" stop >/dev/null 2>&1 || true
  done
  echo "setup: packages installed ($(since "$t"))"
else
  echo "setup: packages ok ($(since "$t"))"
fi

[[ $mode == --build-only ]] && exit 0

# kubernetes-models (the Kubernetes OpenAPI schemas) for ctest's deploy_helm_schemas, into the
# ignored tests/deploy/node_modules; without the registry that test skips and says why.
if [[ $mode != --demo && $mode != --fuzz && ! -d tests/deploy/node_modules/kubernetes-models ]]; then
  t=$(now)
  if timeout 300 npm ci --prefix tests/deploy --no-audit --no-fund --omit=dev >/dev/null 2>&1; then
    echo "setup: npm kubernetes-models ($(since "$t"))"
  else
    echo "setup: npm could not install kubernetes-models (no registry?); deploy_helm_schemas will skip ($(since "$t"))" >&2
  fi
fi

# The official openai SDK for ctest's api_* e2e tests (issue #37), and ajv with an OpenAPI 3.1
# validator for api_openapi_e2e, into the ignored tests/api/node_modules; without the registry
# those tests skip (exit 77) and say why.
if [[ $mode != --demo && $mode != --fuzz && ( ! -d tests/api/node_modules/openai ||
      ! -d tests/api/node_modules/@seriousme/openapi-schema-validator ) ]]; then
  t=$(now)
  if timeout 300 npm ci --prefix tests/api --no-audit --no-fund --omit=dev >/dev/null 2>&1; then
    echo "setup: npm openai ($(since "$t"))"
  else
    echo "setup: npm could not install openai (no registry?); api_videos_sdk_e2e will skip ($(since "$t"))" >&2
  fi
fi

# The console's front-end libraries and bundler (#38: preact, htm, esbuild; ui/package-lock.json)
# into the ignored ui/node_modules, which the build's h3pipe-ui target bundles into build/ui;
# playwright-core for ctest's console_browser_e2e into tests/ui/node_modules.  Without the
# registry the console is not built (/ui/ says so) and that test skips.
if [[ $mode != --demo && $mode != --fuzz && ! -d ui/node_modules/esbuild ]]; then
  t=$(now)
  if timeout 300 npm ci --prefix ui --no-audit --no-fund >/dev/null 2>&1; then
    echo "setup: npm console (preact, htm, esbuild) ($(since "$t"))"
  else
    echo "setup: npm could not install the console's packages (no registry?); /ui/ will not be served ($(since "$t"))" >&2
  fi
fi
if [[ $mode != --demo && $mode != --fuzz && ! -d tests/ui/node_modules/playwright-core ]]; then
  t=$(now)
  if timeout 300 npm ci --prefix tests/ui --no-audit --no-fund --omit=dev >/dev/null 2>&1; then
    echo "setup: npm playwright-core ($(since "$t"))"
  else
    echo "setup: npm could not install playwright-core (no registry?); console_browser_e2e will skip ($(since "$t"))" >&2
  fi
fi

[[ $mode == --no-build ]] && exit 0

# --- configure -----------------------------------------------------------------------------------
nvcc=""
for c in "$(command -v nvcc || true)" /usr/local/cuda/bin/nvcc; do
  if [[ -n $c && -x $c ]]; then nvcc=$c; break; fi
done
gpu=""
if nvidia-smi -L >/dev/null 2>&1; then gpu="nvidia-smi -L"; elif [[ -e /dev/nvidia0 ]]; then gpu=/dev/nvidia0; fi
case ${H3PIPE_CUDA:-auto} in
  ON | on | 1)
    [[ -n $nvcc ]] || { echo "setup: H3PIPE_CUDA=ON but no nvcc (PATH or /usr/local/cuda/bin)" >&2; exit 1; }
    cuda=ON why="H3PIPE_CUDA=ON" ;;
  OFF | off | 0) cuda=OFF why="H3PIPE_CUDA=OFF" ;;
  auto)
    if [[ -n $nvcc && -n $gpu ]]; then cuda=ON why="a GPU ($gpu) and $nvcc"
    elif [[ -n $nvcc ]]; then cuda=OFF why="no GPU visible; H3PIPE_CUDA=ON builds the kernels anyway"
    else cuda=OFF why="no nvcc"; fi ;;
  *) echo "setup: H3PIPE_CUDA must be ON or OFF, not '$H3PIPE_CUDA'" >&2; exit 2 ;;
esac
bdir=build cc=()
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DH3PIPE_CUDA="$cuda" -Wno-dev)
# The demo needs no test (GoogleTest is not among its packages): a new build dir is configured
# without them; one that has them (scripts/test.sh ran here) keeps them.  Every other mode: tests on.
if [[ $mode == --demo ]]; then
  grep -q '^H3PIPE_TESTS:BOOL=ON' build/CMakeCache.txt 2>/dev/null || cmake_args+=(-DH3PIPE_TESTS=OFF)
else
  cmake_args+=(-DH3PIPE_TESTS=ON)
fi
[[ $cuda == ON ]] && cmake_args+=(-DCMAKE_CUDA_COMPILER="$nvcc")
if [[ $mode == --fuzz ]]; then
  # libFuzzer needs clang; its own dir, so that the main build stays on gcc.
  command -v clang++ >/dev/null 2>&1 || { echo "setup: the fuzz build needs clang++ (apt-get install clang)" >&2; exit 1; }
  bdir=build-fuzz cc=(CC=clang CXX=clang++) cuda=OFF why="not in the fuzz build"
  cmake_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DH3PIPE_FUZZ=ON -DH3PIPE_CUDA=OFF -DH3PIPE_TESTS=OFF -Wno-dev)
fi
# A new build dir gets Ninja (one progress count over all requested targets); an existing one
# keeps the generator it was made with.
[[ ! -f $bdir/CMakeCache.txt ]] && command -v ninja >/dev/null 2>&1 && cmake_args+=(-G Ninja)

t=$(now)
log=$bdir/setup-build.log
mkdir -p "$bdir"
if ! env "${cc[@]}" cmake -S . -B "$bdir" "${cmake_args[@]}" >"$bdir/setup-configure.log" 2>&1; then
  grep -A8 -E 'CMake Error' "$bdir/setup-configure.log" >&2 || tail -n 30 "$bdir/setup-configure.log" >&2
  echo "setup: configure of $bdir failed (log $bdir/setup-configure.log)" >&2
  exit 1
fi
grep -A4 'CMake Warning' "$bdir/setup-configure.log" >&2 || true
echo "setup: configure $bdir, CUDA kernels $cuda: $why ($(since "$t"))"

# --- build ---------------------------------------------------------------------------------------
if [[ $mode == --demo ]]; then
  targets=(h3pipe h3pipe-encoder h3pipe-sampler h3pipe-decoder h3pipe-transfer h3pipe-api)
  what="the CLI, 4 services and the API"
elif [[ $mode == --fuzz ]]; then
  mapfile -t targets < <(sed -n 's/^ *h3pipe_add_fuzzer( *\([a-z0-9_]*\).*/\1/p' fuzz/*/CMakeLists.txt | sort -u)
  ((${#targets[@]})) || { echo "setup: no h3pipe_add_fuzzer target under fuzz/" >&2; exit 1; }
  what="${#targets[@]} fuzz targets"
else
  targets=(all)
  what="every target"
fi
jobs=${H3PIPE_JOBS:-$(nproc)}

# progress LOG: the build's own count, from its last progress line: "[12/340]" (Ninja) or
# "[ 45%]" (Makefiles).
progress() {
  tail -c 8192 "$1" 2>/dev/null |
    awk 'match($0, /^\[ *[0-9]+\/[0-9]+\]/) { s = substr($0, 2, RLENGTH - 2); split(s, a, "/");
           if (a[2] > 0) p = sprintf("%d%% (%d/%d)", 100 * a[1] / a[2], a[1], a[2]) }
         match($0, /^\[ *[0-9]+%\]/) { p = substr($0, 2, RLENGTH - 2); gsub(/ /, "", p) }
         END { print p }'
}

t=$(now)
cmake --build "$bdir" -j"$jobs" --target "${targets[@]}" >"$log" 2>&1 &
pid=$!
start_s=$SECONDS last_line=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  p=$(progress "$log")
  if ((tty)); then
    printf '\rsetup: build %s: %s, %ds\033[K' "$what" "${p:-starting}" "$((SECONDS - start_s))"
  elif ((SECONDS - last_line >= 30)); then
    echo "setup: build ${p:-starting} ($(since "$t"))"
    last_line=$SECONDS
  fi
done 2>/dev/null
((tty)) && printf '\r\033[K'
rc=0
wait "$pid" || rc=$?
warnings=$(grep -cE ': warning:' "$log" || true)
if ((rc != 0)); then
  # The compiler's and the linker's own messages (': error:', 'undefined reference'), else the tail.
  if ! grep -E ': (fatal )?error:|undefined reference|CMake Error|No rule to make|ninja: error' "$log" | head -n 40 >&2; then
    tail -n 40 "$log" >&2
  fi
  echo "setup: build of $what FAILED after $(since "$t") (exit $rc; whole log $log)" >&2
  exit 1
fi
if ((warnings)); then
  grep -E ': warning:' "$log" | sort -u | head -n 20 >&2
  echo "setup: $warnings compiler warnings (whole log $log)" >&2
fi
echo "setup: build $what ($(since "$t"))"
