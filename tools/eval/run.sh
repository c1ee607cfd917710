#!/usr/bin/env bash
# The long-context evaluation of docs/real_model.md, from a fresh clone: fetches SmolLM2, builds
# the evaluation (optimised, -march=native), runs every razorkv policy on the task grid and the
# held-out likelihood trials, razor with a chunked prefill, the budget sweep, llama.cpp's quantised
# KV caches and kvpress's presses on the prompts the full cache solves, and writes the tables
# (stdout) and figures into docs/eval/ with the CSV files.
#   bash tools/eval/run.sh [output folder (build/eval/main)]
# About 3 hours on 2 cores; tools/eval/README.md gives each step's time.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

razorkv_require_packages cmake make g++ libeigen3-dev nlohmann-json3-dev python3 python3-venv ca-certificates
out="${1:-$razorkv_root/build/eval/main}"
mkdir -p "$out"/{8k,chunked-long,budget-0.2/long,budget-0.5/long,llama-long,llama-likelihood,kvpress} \
  || razorkv_fail "cannot create $out"
model="$(bash "$razorkv_root/scripts/get_model.sh")" || razorkv_fail "could not fetch the model"
build="$razorkv_root/build/eval/build"
razorkv_build "$build" razorkv_smollm2_eval -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DRAZORKV_BUILD_TESTS=OFF -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=ON -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_NATIVE_ARCH=ON -DRAZORKV_BUILD_KERNELS=OFF
eval_run() { "$build/examples/razorkv_smollm2_eval" "$model" "$razorkv_root" "$@" \
  || razorkv_fail "razorkv_smollm2_eval $* failed"; }
# Every task to 4,096 tokens; at 8,128 the one task the full cache still solves from 2,048 up.
eval_run "$out" --lengths 1024,2048,4096 --likelihood 2
eval_run "$out/8k" --lengths 8128 --tasks single --needles number --likelihood 0
# The budget sweep and razor with a chunked prefill, on cells the full cache solves.
for budget in 0.2 0.5; do
  eval_run "$out/budget-$budget" --lengths 1024 --tasks single --likelihood 0 --budget $budget
  eval_run "$out/budget-$budget/long" --lengths 2048,4096 --tasks single --needles number \
    --likelihood 0 --budget $budget
done
eval_run "$out/chunked-long" --lengths 2048,4096 --tasks single --needles number --likelihood 0 --chunked
cat "$out/prompts.jsonl" "$out/8k/prompts.jsonl" >"$out/all-prompts.jsonl"

bash "$razorkv_root/tools/smollm2/setup_env.sh" || razorkv_fail "could not set up build/venv-smollm2"
llama() { "$razorkv_root/build/venv-smollm2/bin/python" "$razorkv_root/tools/eval/llama_cpp_kv.py" \
  "$model" "$@" || razorkv_fail "llama_cpp_kv.py $* failed"; }
llama "$out/all-prompts.jsonl" "$out/llama_cpp.csv" --lengths 1024 --tasks single,multikey
llama "$out/all-prompts.jsonl" "$out/llama-long/llama_cpp.csv" --lengths 2048,4096,8128 \
  --tasks single --needles number
llama "$out/likelihood.jsonl" "$out/llama-likelihood/likelihood.csv" --likelihood

bash "$razorkv_root/tools/eval/setup_kvpress.sh" || razorkv_fail "could not set up build/venv-kvpress"
kvpress() { "$razorkv_root/build/venv-kvpress/bin/python" "$razorkv_root/tools/eval/kvpress_eval.py" \
  "$model" "$out/all-prompts.jsonl" "$@" || razorkv_fail "kvpress_eval.py $* failed"; }
kvpress "$out/kvpress/kvpress.csv" --lengths 1024 --tasks single
kvpress "$out/kvpress/kvpress-long.csv" --lengths 2048,4096 --tasks single --needles number

docs="$razorkv_root/docs/eval"
mkdir -p "$docs"
python3 "$razorkv_root/tools/eval/report.py" --merge "$docs" "$out" "$out/8k" "$out/chunked-long" \
  "$out/budget-0.2" "$out/budget-0.2/long" "$out/budget-0.5" "$out/budget-0.5/long" \
  "$out/llama-long" "$out/llama-likelihood" "$out/kvpress"
python3 "$razorkv_root/tools/eval/report.py" "$docs" "$docs"
