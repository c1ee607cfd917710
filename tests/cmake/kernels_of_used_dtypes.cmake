# ctest -P script: checks that a translation unit compiled with the kernels header-only
# instantiates decode's kernels for the storage dtypes it decodes and for no other (a quarter of
# the 96 kernels for one dtype, most of the unit's compile time). Arguments: -DNM=<nm>
# -DOBJECT=<file> -DDTYPE=<the one dtype the unit decodes, as mangled: f, d, N5Eigen4halfE or
# N5Eigen8bfloat16E>.
execute_process(COMMAND "${NM}" --defined-only "${OBJECT}" OUTPUT_VARIABLE symbols
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${OBJECT}")
endif()
# Mangled: ...detail<n>isa_<name>11attend_headI<dtype>Li<width>ELi<dim>EE...
string(REGEX MATCHALL "11attend_headI[^L]+Li[0-9]+ELi[0-9]+E" kernels "${symbols}")
list(REMOVE_DUPLICATES kernels)
set(used 0)
set(others "")
foreach(kernel IN LISTS kernels)
  string(REGEX REPLACE "^11attend_headI([^L]+)Li.*$" "\\1" dtype "${kernel}")
  if(dtype STREQUAL DTYPE)
    math(EXPR used "${used} + 1")
  else()
    list(APPEND others "${kernel}")
  endif()
endforeach()
if(used EQUAL 0)
  message(FATAL_ERROR "${OBJECT} defines no attend_head for ${DTYPE}: is it still header-only?")
endif()
list(LENGTH others count)
if(count GREATER 0)
  list(JOIN others "\n  " shown)
  message(FATAL_ERROR "${OBJECT} decodes only ${DTYPE} but defines ${count} kernel(s) of other "
                      "dtypes:\n  ${shown}")
endif()
message(STATUS "${OBJECT}: ${used} attend_head kernels, all for ${DTYPE}")
