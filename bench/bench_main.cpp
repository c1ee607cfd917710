// The one razorkv benchmark binary: bench_decode.cpp, bench_policies.cpp and bench_scoring.cpp
// register into it.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
