#!/usr/bin/env bash
# scripts/bench.sh fuzz [SECONDS] [TARGET...]: runs every libFuzzer target found in the fuzz build
# (fuzz_spec, fuzz_config, fuzz_latent, fuzz_transfer) for SECONDS each (default 60) over a copy of its
# checked-in seed corpus and dictionary, and prints one JSON object last:
#   {"bench":"fuzz","seconds_per_target":60,"targets":[{"target":..,"executions":..,
#    "exec_per_s":..,"findings":..,"corpus_in":..,"corpus_out":..,"findings_dir":..}],
#    "total_executions":..,"total_findings":..}
# Findings (crash-/leak-/timeout-/oom- inputs) are kept in <fuzz build>/fuzz/findings/<target>/;
# reproduce one with `<fuzz build>/fuzz/<target> FILE`.  Fork mode keeps going after a finding.
# H3PIPE_FUZZ_BUILD: the fuzz build dir (default build-fuzz; built here with clang if missing).
# H3PIPE_FUZZ_JOBS: parallel fuzzing processes per target (default 1).
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
build=${H3PIPE_FUZZ_BUILD:-build-fuzz}
jobs=${H3PIPE_FUZZ_JOBS:-1}

# Every target with a fuzz/<name>/CMakeLists.txt; any not built yet is built here (an existing
# fuzz build from before a target was added gets it too).
known=()
for d in fuzz/*/CMakeLists.txt; do known+=("fuzz_$(basename "$(dirname "$d")")"); done
missing=()
for t in "${known[@]}"; do [[ -x $build/fuzz/$t ]] || missing+=("$t"); done
if ((${#missing[@]} > 0)); then
  command -v clang++ >/dev/null || { echo "bench fuzz: clang++ is missing (scripts/setup.sh)" >&2; exit 2; }
  echo "bench fuzz: building ${missing[*]} in $build" >&2
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH3PIPE_FUZZ=ON \
    -DH3PIPE_TESTS=OFF -Wno-dev >/dev/null && cmake --build "$build" -j2 --target "${missing[@]}" >/dev/null || {
    echo "bench fuzz: the fuzz build failed" >&2; exit 2; }
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in "$build"/fuzz/fuzz_*; do [[ -x $f && -f $f ]] && targets+=("$(basename "$f")"); done
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=()
total_exec=0
total_find=0
for t in "${targets[@]}"; do
  bin=$build/fuzz/$t
  name=${t#fuzz_}
  [[ -x $bin ]] || { echo "bench fuzz: no target $bin" >&2; exit 2; }
  corpus=$work/$t/corpus
  findings=$build/fuzz/findings/$t
  mkdir -p "$corpus" "$work/$t/artifacts" "$findings"
  [[ -d fuzz/$name/corpus ]] && cp -r fuzz/"$name"/corpus/. "$corpus"/
  corpus_in=$(find "$corpus" -type f | wc -l)
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 -fork="$jobs"
        -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -artifact_prefix="$work/$t/artifacts/")
  for d in fuzz/"$name"/*.dict; do [[ -f $d ]] && args+=(-dict="$d"); done
  echo "bench fuzz: $t for ${secs}s" >&2
  start=$(date +%s.%N)
  "$bin" "${args[@]}" "$corpus" >"$work/$t/log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  # Fork mode prints "#EXECS: cov: .. exec/s: .. oom/timeout/crash: a/b/c time: ..": take the last.
  execs=$(grep -oE '^#[0-9]+: cov' "$work/$t/log" | tail -1 | tr -dc '0-9')
  [[ -n $execs ]] || execs=$(grep -oE '^#[0-9]+' "$work/$t/log" | tail -1 | tr -dc '0-9')
  [[ -n $execs ]] || execs=0
  cp "$work/$t/artifacts"/* "$findings"/ 2>/dev/null
  nfind=$(find "$work/$t/artifacts" -type f | wc -l)
  corpus_out=$(find "$corpus" -type f | wc -l)
  if ((rc != 0 && nfind == 0)); then
    echo "bench fuzz: $t exited $rc without a finding; last lines:" >&2
    tail -5 "$work/$t/log" >&2
  fi
  rate=$(awk -v e="$execs" -v s="$start" -v t="$end" 'BEGIN { d = t - s; printf "%.0f", (d > 0 ? e / d : 0) }')
  results+=("{\"target\":\"$t\",\"seconds\":$secs,\"executions\":$execs,\"exec_per_s\":$rate,\"findings\":$nfind,\"exit\":$rc,\"corpus_in\":$corpus_in,\"corpus_out\":$corpus_out,\"findings_dir\":\"$findings\"}")
  total_exec=$((total_exec + execs))
  total_find=$((total_find + nfind))
done
joined=$(IFS=,; echo "${results[*]}")
echo "{\"bench\":\"fuzz\",\"seconds_per_target\":$secs,\"targets\":[$joined],\"total_executions\":$total_exec,\"total_findings\":$total_find}"
