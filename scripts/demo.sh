#!/usr/bin/env bash
# Builds and runs the razorkv demo (optimised, -march=native) on a fresh Debian machine: a real
# pretrained LLM, SmolLM2-135M-Instruct (fetched on first use by scripts/get_model.sh), run by
# the C++ engine of examples/engine/ on razorkv: the committed plan -> a ~6K-token document with
# a passphrase hidden in it, compressed -> the passphrase asked for over the full cache, the
# razor cache and StreamingLLM's at the same memory.
#   bash scripts/demo.sh [document tokens] [depth]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

razorkv_require_packages cmake make g++ libeigen3-dev nlohmann-json3-dev python3 python3-venv ca-certificates

model="$(bash "$razorkv_root/scripts/get_model.sh")" || razorkv_fail "could not fetch the model"
build="$razorkv_root/build"
mkdir -p "$build"
razorkv_build "$build/demo" razorkv_smollm2_demo -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DRAZORKV_BUILD_TESTS=OFF -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=ON -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_NATIVE_ARCH=ON -DRAZORKV_BUILD_KERNELS=OFF
"$build/demo/examples/razorkv_smollm2_demo" "$model" "$razorkv_root" "$@"
