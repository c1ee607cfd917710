#!/usr/bin/env bash
# The long-context evaluation of docs/real_model.md, from a fresh clone: fetches SmolLM2, builds
# the evaluation (optimised, -march=native), runs every razorkv policy on the task grid and the
# held-out likelihood trials, runs llama.cpp's quantised KV caches on a subset of the same
# prompts, and writes the tables (stdout) and figures into docs/eval/ with the CSV files.
#   bash tools/eval/run.sh [output folder (build/eval/main)]
# About 75 minutes on 2 cores; tools/eval/README.md.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

razorkv_require_packages cmake make g++ libeigen3-dev nlohmann-json3-dev python3 python3-venv ca-certificates
out="${1:-$razorkv_root/build/eval/main}"
mkdir -p "$out" || razorkv_fail "cannot create $out"
model="$(bash "$razorkv_root/scripts/get_model.sh")" || razorkv_fail "could not fetch the model"
build="$razorkv_root/build/eval/build"
razorkv_build "$build" razorkv_smollm2_eval -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DRAZORKV_BUILD_TESTS=OFF -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=ON -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_NATIVE_ARCH=ON -DRAZORKV_BUILD_KERNELS=OFF
# Every task to 4,096 tokens; at 8,128 the one task the full cache still solves from 2,048 up.
"$build/examples/razorkv_smollm2_eval" "$model" "$razorkv_root" "$out" \
  --lengths 1024,2048,4096 --likelihood 2 || razorkv_fail "razorkv_smollm2_eval failed"
mkdir -p "$out/8k"
"$build/examples/razorkv_smollm2_eval" "$model" "$razorkv_root" "$out/8k" \
  --lengths 8128 --tasks single --needles number --likelihood 0 \
  || razorkv_fail "razorkv_smollm2_eval (8,128 tokens) failed"
bash "$razorkv_root/tools/smollm2/setup_env.sh" || razorkv_fail "could not set up build/venv-smollm2"
"$razorkv_root/build/venv-smollm2/bin/python" "$razorkv_root/tools/eval/llama_cpp_kv.py" "$model" \
  "$out/prompts.jsonl" "$out/llama_cpp.csv" --lengths 1024 --tasks single,multikey \
  || razorkv_fail "llama_cpp_kv.py failed"
docs="$razorkv_root/docs/eval"
mkdir -p "$docs"
python3 "$razorkv_root/tools/eval/report.py" --merge "$docs" "$out" "$out/8k"
python3 "$razorkv_root/tools/eval/report.py" "$docs" "$docs"
