// tests/openmp/openmp_unit.cpp: the fan-out measurement in a unit compiled with OpenMP.
#include "openmp/fanout_unit.hpp"

#include <omp.h>

#if !defined(_OPENMP)
#error "openmp_unit.cpp must be compiled with OpenMP"
#endif

namespace razorkv_test {
fanout_report fanout_of_openmp_unit() { return measure_this_unit(); }
void set_openmp_threads(int threads) { omp_set_num_threads(threads); }
}  // namespace razorkv_test
