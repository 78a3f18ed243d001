#!/bin/sh
# ctest (label fuzz): a short fixed-length libFuzzer run of one target over its checked-in seed
# corpus.  New inputs go to a temp dir, so the corpus stays untouched.  Exit 77 (skipped, with the
# reason printed) when the fuzz build is absent: it needs clang and its own build dir.
#   fuzz_smoke.sh SOURCE_DIR TARGET RUNS
#   H3PIPE_FUZZ_BUILD: the fuzz build dir (default SOURCE_DIR/build-fuzz, what scripts/test.sh builds)
set -u
src=$1
target=$2
runs=$3
build=${H3PIPE_FUZZ_BUILD:-$src/build-fuzz}
bin=$build/fuzz/$target
name=${target#fuzz_}
if [ ! -x "$bin" ]; then
  echo "SKIP: $bin is not built. Build it with: CC=clang CXX=clang++ cmake -S $src -B $build" \
       "-DH3PIPE_FUZZ=ON -DH3PIPE_TESTS=OFF && cmake --build $build --target $target (scripts/test.sh does this)"
  exit 77
fi
case $name in
  transfer) code="$src/common/transfer/frames.cpp $src/common/transfer/offer.cpp $src/common/transfer/sender_parts.cpp" ;;
  latent) code="$src/common/latent/latent.cpp $src/common/latent/safetensors.cpp $src/common/latent/check.cpp $src/common/latent/profile.cpp" ;;
  comfyui) code="$src/common/comfyui/graph.cpp $src/common/comfyui/split.cpp $src/common/comfyui/ui_workflow.cpp $src/common/runtime/comfyui_client.cpp $src/common/core/json_parse.cpp" ;;
  *) code="$src/common/spec/spec.cpp $src/common/config/config.cpp" ;;
esac
for f in "$src"/fuzz/"$name"/*.cpp $code; do
  if [ "$f" -nt "$bin" ]; then
    echo "note: $f is newer than $bin; rebuild the fuzz dir to fuzz the current code" >&2
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
set -- -runs="$runs" -max_len=16384 -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/" -print_final_stats=1
[ -f "$src/fuzz/$name/$name.dict" ] && set -- "$@" -dict="$src/fuzz/$name/$name.dict"
corpora="$src/fuzz/$name/corpus"
# The latent reader's regression corpus of malformed files is fuzzed from too.
[ "$name" = latent ] && corpora="$corpora $src/tests/fixtures/latent"
"$bin" "$@" "$work" $corpora >"$work/log" 2>&1
rc=$?
tail -25 "$work/log"
found=$(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null)
if [ -n "$found" ]; then
  mkdir -p "$build/fuzz/findings"
  cp $found "$build/fuzz/findings/"
  echo "FAIL: $target found failing input(s), kept in $build/fuzz/findings; reproduce: $bin $build/fuzz/findings/<file>"
  exit 1
fi
exit $rc
