#!/usr/bin/env bash
# Builds and runs the razorkv demo (optimised, -march=native) on a fresh Debian machine: the
# model trained in tools/train/, run by the C++ engine of examples/engine/ on razorkv: calibration
# -> plan -> a long document compressed -> a question answered over the full and the razor cache.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

razorkv_require_packages cmake make g++ libeigen3-dev nlohmann-json3-dev

build="$razorkv_root/build"
mkdir -p "$build"
razorkv_build "$build/demo" razorkv_trained_demo -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=g++ \
  -DRAZORKV_BUILD_TESTS=OFF -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=ON -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_NATIVE_ARCH=ON -DRAZORKV_BUILD_KERNELS=OFF
"$build/demo/examples/razorkv_trained_demo" "$razorkv_root/examples/engine/model/model.safetensors" "$razorkv_root" "$@"
