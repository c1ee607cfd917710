#!/usr/bin/env bash
# Builds razorkv's libFuzzer targets (Clang, ASan + UBSan) and runs each from its seed corpus for
# RAZORKV_FUZZ_SECONDS seconds (default 10), one target per core; fails on any crash, leak,
# sanitizer report or property violation, leaving the reproducer in build/fuzz/findings/<target>/.
#   bash scripts/fuzz.sh                      # every target, 10 s each (what scripts/test.sh runs)
#   RAZORKV_FUZZ_SECONDS=600 bash scripts/fuzz.sh fuzz_npy   # one target, 10 minutes
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

razorkv_require_packages cmake make clang libclang-rt-14-dev libeigen3-dev nlohmann-json3-dev

seconds="${RAZORKV_FUZZ_SECONDS:-10}"
build="$razorkv_root/build/fuzz"
mkdir -p "$razorkv_root/build"
razorkv_build "$build" all -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DRAZORKV_BUILD_TESTS=OFF -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=OFF -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_BUILD_FUZZERS=ON -DRAZORKV_BUILD_KERNELS=OFF -DRAZORKV_WARNINGS_AS_ERRORS=ON

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fuzz_head_plan_json fuzz_head_scores_json fuzz_mindspore_json fuzz_duoattention_tsv fuzz_npy fuzz_safetensors fuzz_gguf
    fuzz_compute fuzz_razor_state)
fi
# fuzz_target <target>: one target from a copy of its seed corpus (so that the repository's
# stays small and reviewed); the targets run one per core.
fuzz_target() {
  local target="$1"
  local corpus="$build/corpus/$target" findings="$build/findings/$target"
  rm -rf "$corpus" "$findings"
  mkdir -p "$corpus" "$findings"
  cp "$razorkv_root/fuzz/corpus/$target/"* "$corpus/"
  echo "== razorkv: fuzzing $target for $seconds s"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/$target" "$corpus" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -max_len=8192 \
      -artifact_prefix="$findings/" -print_final_stats=1 >"$findings.log" 2>&1; then
    tail -40 "$findings.log" >&2
    echo "razorkv: $target found a failure (reproducer in $findings/)" >&2
    return 1
  fi
  echo "$target: $(grep -E "^#[0-9]+[[:space:]]+DONE" "$findings.log" || true)"
}
razorkv_in_parallel fuzz_target "${targets[@]}" || razorkv_fail "fuzzing found a failure (above)"
echo "razorkv: fuzzing found nothing"
