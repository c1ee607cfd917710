// tests/openmp/plain_unit.cpp: the fan-out measurement in a unit compiled without OpenMP.
#include "openmp/fanout_unit.hpp"

#if defined(_OPENMP)
#error "plain_unit.cpp must be compiled without OpenMP"
#endif

namespace razorkv_test {
fanout_report fanout_of_plain_unit() { return measure_this_unit(); }
}  // namespace razorkv_test
