#!/usr/bin/env bash
# The razorkv test suite on a fresh Debian machine: installs what it needs, then runs one tier.
#   bash scripts/test.sh          the full tier, what CI runs: all of the steps below
#   bash scripts/test.sh quick    steps 0 and 1 without valgrind, benchmarks and examples (a
#                                  contributor's check before each commit: about 5 minutes)
#  0. formatting: every C++ file as .clang-format says (scripts/check_format.sh), and the
#     include graph's order of rooms (scripts/check_includes.py);
#  1. GCC, C++17, -Werror, portable flags: unit tests, C++17/C++20 header checks, consumer
#     projects (add_subdirectory, find_package, pkg-config), the Python module's tests and the
#     CLI's, benchmark and demo smoke runs, and the engine on SmolLM2-135M (fetched by
#     scripts/get_model.sh) against llama.cpp's committed reference; that every test
#     docs/guarantees.md cites exists (scripts/check_guarantees.py); `pip install .` into a
#     fresh virtual environment, the module's tests on what it installed, and with torch and
#     transformers razorkv.hf's (on SmolLM2 too); then valgrind memcheck on most of those unit
#     tests;
#  2. Clang, C++20, -march=native, AddressSanitizer + UndefinedBehaviorSanitizer: unit tests at
#     the exhaustive level (randomised sweeps over several seeds);
#  3. Clang, ThreadSanitizer: the tests that decode and append from several threads at once;
#  4. every libFuzzer target from its seed corpus, RAZORKV_FUZZ_SECONDS (default 10) each;
#  5. aarch64 (NEON), cross-compiled with GCC: the SIMD, decode, prefill and column-sum tests under
#     qemu-user.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

tier="${1:-full}"
[ "$tier" = full ] || [ "$tier" = quick ] || razorkv_fail "unknown tier '$tier' (full or quick)"

# The Python module is built for Debian's interpreter, the one python3-numpy and python3-torch
# are installed for (a pyenv or virtualenv python3 earlier on PATH would not see them). Debian's
# torch multiplies through the generic BLAS unless OpenBLAS is installed (5 -> 185 GFLOP/s).
python_packages=(pybind11-dev python3-dev python3-numpy python3-torch libopenblas0-pthread)
python_options=(-DRAZORKV_BUILD_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3)
if [ "$tier" = quick ]; then
  razorkv_require_packages cmake make g++ clang-format libeigen3-dev libgtest-dev nlohmann-json3-dev \
    libcli11-dev pkg-config "${python_packages[@]}"
else
  razorkv_require_packages cmake make g++ clang clang-format libclang-rt-14-dev libeigen3-dev libgtest-dev \
    nlohmann-json3-dev libcli11-dev libbenchmark-dev valgrind pkg-config "${python_packages[@]}" \
    g++-aarch64-linux-gnu qemu-user python3-venv ca-certificates
fi

build="$razorkv_root/build"
mkdir -p "$build"

echo "== razorkv: formatting (.clang-format, clang-format 14)"
bash "$razorkv_root/scripts/check_format.sh" || razorkv_fail "C++ files are not formatted (scripts/check_format.sh --fix)"
echo "== razorkv: the include graph (no header includes a room above its own)"
python3 "$razorkv_root/scripts/check_includes.py" >/dev/null || razorkv_fail "a header includes a room above its own (scripts/check_includes.py)"

if [ "$tier" = quick ]; then
  # -O1: the tests' compile time is most of this tier, and -O1 compiles in 60% of -O3's time.
  # The kernels are compiled once (for the build's flags, not once per x86-64 set), and the
  # kernel tests' second copy and the headers compiled one by one are left to the full tier.
  echo "== razorkv (quick tier): GCC, C++17, -O1, warnings as errors, sanity-sized sweeps"
  razorkv_build "$build/quick" all -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
    -DCMAKE_CXX_COMPILER=g++ -DRAZORKV_KERNEL_DISPATCH=OFF -DRAZORKV_QUICK_TESTS=ON \
    -DRAZORKV_BUILD_TESTS=ON -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=OFF -DRAZORKV_BUILD_TOOLS=ON \
    -DRAZORKV_WARNINGS_AS_ERRORS=ON -DRAZORKV_TEST_LEVEL=0 "${python_options[@]}"
  (cd "$build/quick" && ctest --output-on-failure -j "$razorkv_jobs") || razorkv_fail "tests failed (quick tier)"
  echo "razorkv: quick tier passed (the full tier: bash scripts/test.sh)"
  exit 0
fi

# Debug information is line tables only (-g1): what valgrind's and the sanitizers' reports
# print, at two thirds of the full debug information's compile time (measured on one test unit).
echo "== razorkv: SmolLM2-135M for the tests on a real model (scripts/get_model.sh)"
model="$(bash "$razorkv_root/scripts/get_model.sh")" || razorkv_fail "could not fetch the model"

echo "== razorkv: GCC, C++17, warnings as errors"
razorkv_build "$build/gcc" all -DRAZORKV_SMOLLM2_GGUF="$model" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DCMAKE_CXX_COMPILER=g++ \
  -DRAZORKV_BUILD_TESTS=ON -DRAZORKV_BUILD_BENCHMARKS=ON -DRAZORKV_BUILD_EXAMPLES=ON -DRAZORKV_BUILD_TOOLS=ON \
  -DRAZORKV_WARNINGS_AS_ERRORS=ON "${python_options[@]}"
(cd "$build/gcc" && ctest --output-on-failure -j "$razorkv_jobs") || razorkv_fail "tests failed (GCC build)"
# Every test docs/guarantees.md cites must exist in this build (or be a fuzz target, a Python
# test, a file): a renamed test cannot leave a guarantee defended by nothing.
(cd "$build/gcc" && ctest -N >ctest_list.txt)
python3 "$razorkv_root/scripts/check_guarantees.py" "$build/gcc/ctest_list.txt" \
  || razorkv_fail "docs/guarantees.md cites a test that does not exist (above)"

echo "== razorkv: pip install . into a fresh virtual environment (Debian's Python), the module's tests,"
echo "   then torch and transformers beside it and razorkv.hf's tests (SmolLM2 through transformers)"
RAZORKV_SMOLLM2_GGUF="$model" bash "$razorkv_root/scripts/check_pip_install.sh" /usr/bin/python3 \
  "$build/venv-pip" --hf || razorkv_fail "pip install . failed its check (above)"

echo "== razorkv: valgrind memcheck (the GCC build's cache, decode, compression, policy and io tests)"
# One suite per core (memcheck runs a program on one thread), the longest first.
# RazorkvBudget (the memory calculator, plain arithmetic) stays out, as it was when it lived in the
# select suite: GCC's code for an empty std::optional argument tests its unset payload, which
# memcheck reports as a branch on an uninitialised value.
memcheck_suite() {
  local suite="$1" log="$build/gcc/memcheck_$1.log"
  # The soak, 10-million-fold, fidelity, every-chunk-size and prefill-sweep cases take minutes
  # under valgrind; ASan runs them below, and ThreadSanitizer the threaded ones.
  valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
    "$build/gcc/tests/razorkv_${suite}_tests" --gtest_brief=1 \
    --gtest_filter='-*Soak*:*TenMillion*:*Fidelity*:*EveryChunkSize*:*Prefill*MatchesTheReference*:RazorkvBudget.*:Threaded*:RazorkvGgufSmolLM2.*' \
    >"$log" 2>&1 && { echo "razorkv_${suite}_tests: $(grep -E '^\[  PASSED' "$log")"; return 0; }
  cat "$log" >&2
  echo "razorkv: valgrind memcheck failed on razorkv_${suite}_tests" >&2
  return 1
}
razorkv_in_parallel memcheck_suite attention decode policies compress cache io \
  || razorkv_fail "valgrind memcheck failed (report above)"

echo "== razorkv: Clang, C++20, -march=native, ASan + UBSan"
# razorkv::kernels is compiled once, for -march=native (RAZORKV_KERNEL_DISPATCH off): the sets
# this CPU would not pick never run here, and each costs minutes under the sanitizers. The GCC
# build above runs every set the CPU has, and the run-time choice.
razorkv_build "$build/asan" all -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DCMAKE_CXX_STANDARD=20 -DRAZORKV_KERNEL_DISPATCH=OFF \
  -DRAZORKV_BUILD_TESTS=ON -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=OFF -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_WARNINGS_AS_ERRORS=ON -DRAZORKV_NATIVE_ARCH=ON -DRAZORKV_SANITIZE=ON -DRAZORKV_TEST_LEVEL=2
(cd "$build/asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$razorkv_jobs") || razorkv_fail "tests failed (sanitizer build)"

echo "== razorkv: Clang, ThreadSanitizer: threads decoding and appending at once"
# The threaded tests link razorkv::kernels, compiled once here (dispatch off) with the sanitizer.
razorkv_build "$build/tsan" razorkv_decode_tests -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1" -DCMAKE_CXX_STANDARD=20 -DRAZORKV_KERNEL_DISPATCH=OFF \
  -DRAZORKV_BUILD_TESTS=ON -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=OFF \
  -DRAZORKV_BUILD_TOOLS=OFF -DRAZORKV_WARNINGS_AS_ERRORS=ON -DRAZORKV_SANITIZE_THREAD=ON
TSAN_OPTIONS=halt_on_error=1 "$build/tsan/tests/razorkv_decode_tests" --gtest_brief=1 \
  --gtest_filter='*Thread*' || razorkv_fail "ThreadSanitizer found a race"

echo "== razorkv: libFuzzer targets, ${RAZORKV_FUZZ_SECONDS:-10} s each"
bash "$razorkv_root/scripts/fuzz.sh" || razorkv_fail "fuzzing found a failure"

echo "== razorkv: aarch64 (NEON), cross-compiled, the kernel tests under qemu-user"
# No Arm machine here: the kernels' vector code for NEON (half widened in registers included) is
# compiled by Debian's cross GCC and checked against the scalar references under emulation.
razorkv_build "$build/aarch64" razorkv_cross_kernel_tests -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$razorkv_root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DRAZORKV_BUILD_TESTS=ON -DRAZORKV_BUILD_BENCHMARKS=OFF -DRAZORKV_BUILD_EXAMPLES=OFF -DRAZORKV_BUILD_TOOLS=OFF \
  -DRAZORKV_BUILD_PYTHON=OFF -DRAZORKV_WARNINGS_AS_ERRORS=ON
(cd "$build/aarch64" && ctest --output-on-failure --no-tests=error -j "$razorkv_jobs" -R '^cross[.]') \
  || razorkv_fail "tests failed (aarch64 under qemu-user)"

echo "razorkv: all tests passed"
