#!/usr/bin/env bash
# The prepared GPU check of the builtin model's device backend (issue #16; docs/model.md "Device
# backend"): CPU/GPU parity (tests/model/model_gpu_test.cpp) and the device benchmark
# (bench/runtime/bench_device.cpp, NVML series through common/gpu's exporter, nvidia-smi dmon
# beside it), results under $OUT (flat: at most 8 files come back from a device machine).
#
# Expected runtime on one H200 with 16 cores: ~3 minutes from the bundle (parity ~30 s; benchmark
# ~2 min: bf16 GEMM peak 10 s, default model ~15 s, large model ~40 s of which seeded weights and
# their upload ~25 s, sampled CPU reference ~40 s).  Building from the tree instead adds ~4 min
# (-j16), and needs the project's -dev packages on that machine.  Run it with timeout_s=480: two
# runs fit a 15-minute device budget.
#
#   here, no GPU:   scripts/gpu_check.sh --bundle
#                   -> build-gpu/gpu-bundle.tar.xz (7 MB; ~1 min here): the parity test and the device bench
#                      built with this machine's CUDA 13.0 toolkit, their shared libraries and
#                      loader (glibc included; cuBLASLt and the driver come from the device)
#   device machine: run(command="scripts/gpu_check.sh", carry=["build-gpu/gpu-bundle.tar.xz"],
#                       timeout_s=480)
#   a GPU host with the project's packages:  scripts/gpu_check.sh --build
#
# UNRUN: written and its bundle built on a machine without a GPU; nothing of it has run on one.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=auto
[[ ${1:-} == --bundle ]] && mode=bundle
[[ ${1:-} == --build ]] && mode=build
bundle_tar=build-gpu/gpu-bundle.tar.xz

find_nvcc() {
  command -v nvcc 2>/dev/null || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; }
}

if [[ $mode == bundle ]]; then
  set -e
  build=${BUILD_DIR:-build}
  nvcc=$(find_nvcc) || { echo "gpu_check --bundle: no nvcc (CUDA toolkit) here" >&2; exit 2; }
  t0=$(date +%s)
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DH3PIPE_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -Wno-dev >/dev/null
  cmake --build "$build" -j"${JOBS:-2}" --target model_gpu_test_bundle bench_runtime_device >/dev/null
  stage=build-gpu/bundle
  rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib"
  cp "$build/tests/model_gpu_test_bundle" "$build/bench/bench_runtime_device" "$stage/bin/"
  # Shared libraries of both, except what must be the device's own: the driver (libcuda,
  # libnvidia-ml) and cuBLAS/cuBLASLt (hundreds of MB; the device's CUDA 13 toolkit has them).
  for b in "$stage"/bin/*; do
    ldd "$b" | awk '/=>/ {print $3} /ld-linux/ {print $1}'
  done | sort -u | while read -r lib; do
    [[ -f $lib ]] || continue
    case $(basename "$lib") in libcuda.so* | libnvidia-ml* | libcublas*) continue ;; esac
    cp -L "$lib" "$stage/lib/$(basename "$lib")"
  done
  strip --strip-unneeded "$stage"/bin/* "$stage"/lib/*.so* 2>/dev/null || true
  (cd "$stage/lib" && [[ -f ld-linux-x86-64.so.2 ]] || cp -L /lib64/ld-linux-x86-64.so.2 .)
  echo "built $(date -u +%FT%TZ) on $(uname -n) with $("$nvcc" --version | tail -1)" >"$stage/BUILD_INFO"
  tar -C build-gpu -cJf "$bundle_tar" bundle
  echo "gpu_check --bundle: $bundle_tar $(du -h "$bundle_tar" | cut -f1) in $(( $(date +%s) - t0 )) s"
  exit 0
fi

OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
log=$OUT/log.txt
exec > >(tee -a "$log") 2>&1
t_start=$(date +%s)
stamp() { echo "[gpu_check +$(( $(date +%s) - t_start ))s] $*"; }

stamp "start on $(uname -n), $(nproc) cores"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit --format=csv || stamp "nvidia-smi failed"
nvidia-smi -L || true

# The device's own libraries: the driver's libcuda / libnvidia-ml and a CUDA 13 cuBLASLt.
lib_dir_of() {  # first directory holding a file named $1
  local f
  f=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n {print $NF; exit}')
  [[ -n $f ]] || f=$(find /usr/local/cuda/lib64 /usr/local/cuda*/lib64 /usr/local/nvidia /usr/lib /opt \
                       $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
                       -name "$1" -print -quit 2>/dev/null)
  [[ -n $f ]] && dirname "$f"
}
driver_dir=$(lib_dir_of libcuda.so.1)
nvml_dir=$(lib_dir_of libnvidia-ml.so.1)
cublas_dir=$(lib_dir_of libcublasLt.so.13)
stamp "libcuda: ${driver_dir:-NOT FOUND}; libnvidia-ml: ${nvml_dir:-NOT FOUND}; libcublasLt.so.13: ${cublas_dir:-NOT FOUND}"

run_bin=()   # prefix that runs one of the check binaries
test_bin="" bench_bin=""
if [[ $mode == auto && -f $bundle_tar ]]; then
  b=/tmp/h3pipe-gpu-bundle
  rm -rf "$b" && mkdir -p "$b" && tar -C "$b" -xJf "$bundle_tar"
  b=$b/bundle
  cat "$b/BUILD_INFO"
  libpath="$b/lib:${cublas_dir:-}:${driver_dir:-}:${nvml_dir:-}"
  # Run with the bundle's own loader and glibc (this machine's may be older than the build's).
  run_bin=("$b/lib/ld-linux-x86-64.so.2" --library-path "$libpath")
  if ! "${run_bin[@]}" "$b/bin/model_gpu_test_bundle" --gtest_list_tests >/dev/null 2>&1; then
    stamp "the bundle's loader failed; trying the system loader with LD_LIBRARY_PATH"
    export LD_LIBRARY_PATH=$libpath
    run_bin=()
  fi
  test_bin=$b/bin/model_gpu_test_bundle
  bench_bin=$b/bin/bench_runtime_device
else
  nvcc=$(find_nvcc) || { stamp "no bundle and no nvcc: nothing to run"; exit 3; }
  stamp "building from the tree with $nvcc"
  if ! cmake -S . -B build-gpu/tree -DCMAKE_BUILD_TYPE=Release -DH3PIPE_CUDA=ON -DH3PIPE_CUDA_ARCHS=90 \
       -DCMAKE_CUDA_COMPILER="$nvcc" -Wno-dev >"$OUT/build.txt" 2>&1; then
    stamp "configure failed (the project's -dev packages missing here?): see build.txt"
    tail -20 "$OUT/build.txt"
    exit 3
  fi
  if ! cmake --build build-gpu/tree -j"$(nproc)" --target model_gpu_test model_device_test bench_runtime \
       >>"$OUT/build.txt" 2>&1; then
    stamp "build failed: see build.txt"
    grep -E "error" "$OUT/build.txt" | head -20
    exit 3
  fi
  test_bin=build-gpu/tree/tests/model_gpu_test
  bench_bin=build-gpu/tree/bench/bench_runtime
  # 77: some cases skipped (on a GPU machine, the no-device ones), none failed (gtest_main.cpp).
  dev_rc=0
  build-gpu/tree/tests/model_device_test --gtest_brief=1 || dev_rc=$?
  [ "$dev_rc" -eq 0 ] || [ "$dev_rc" -eq 77 ] || stamp "model_device_test FAILED (exit $dev_rc)"
fi
stamp "binaries ready"

# 1. Parity (gpu-labelled tests); on this machine a missing GPU fails instead of skipping.
export H3PIPE_REQUIRE_GPU=1
timeout 240 "${run_bin[@]}" "$test_bin" --gtest_output="json:$OUT/gpu_test.json"
test_rc=$?
stamp "parity tests rc=$test_rc"

# 2. Benchmark, with nvidia-smi dmon as a second, independent scrape of the same counters.
nvidia-smi dmon -s pum -d 1 >"$OUT/dmon.txt" 2>&1 &
dmon=$!
timeout 300 "${run_bin[@]}" "$bench_bin" --device cuda --width 736 --height 416 --frames 124 --fps 24 \
  --steps 6 --settings '{"threads": 16, "memory_budget_mb": 8192}' \
  --metrics-out "$OUT/nvml.jsonl" >"$OUT/bench.json"
bench_rc=$?
kill "$dmon" 2>/dev/null
stamp "bench rc=$bench_rc"
tail -c 4000 "$OUT/bench.json"
echo
stamp "done: tests rc=$test_rc bench rc=$bench_rc (results in $OUT)"
exit $(( test_rc != 0 || bench_rc != 0 ))
