# ctest -P script: checks that one ISA's object of razorkv::kernels defines no code outside that
# ISA's namespace. The linker keeps one copy of an inline function that several objects define;
# if an AVX-512 object exported such a copy (a helper the compiler did not inline), an SSE2 CPU
# could end up running it. Arguments: -DNM=<nm> -DISA=<avx512_zen|avx512|avx2|sse2|build>
# -DOBJECT=<file>.
# Mangled names: a symbol whose name mentions the ISA's namespace anywhere (a function in it, or a
# template instantiated for one of its types) is unique to that ISA; demangled return types can
# hold parentheses and are harder to read reliably.
execute_process(COMMAND "${NM}" --defined-only "${OBJECT}" OUTPUT_VARIABLE symbols
                RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${OBJECT}")
endif()
string(LENGTH "isa_${ISA}" isa_length)  # as the Itanium mangling spells a name: <length><name>
string(REPLACE "\n" ";" lines "${symbols}")
set(leaked "")
foreach(line IN LISTS lines)
  # "<address> <type> <name>": local symbols (lower-case type, except u/v/w) cannot be merged.
  if(NOT line MATCHES "^[0-9a-fA-F]* ([A-Zuvw]) (.*)$")
    continue()
  endif()
  set(name "${CMAKE_MATCH_2}")
  if(name MATCHES "7razorkv2v[0-9]+6detail${isa_length}isa_${ISA}"
     OR name MATCHES "compiled_kernels_isa_${ISA}Ev$"
     OR name STREQUAL "DW.ref.__gxx_personality_v0"
     OR name MATCHES "^_ZT[IS]")  # typeinfo data (UBSan's function checks), not code
    continue()
  endif()
  list(APPEND leaked "${name}")
endforeach()
list(LENGTH leaked count)
if(count GREATER 0)
  list(JOIN leaked "\n  " shown)
  message(FATAL_ERROR "razorkv::kernels' ${ISA} object defines ${count} mergeable symbol(s) outside "
                      "namespace isa_${ISA}:\n  ${shown}")
endif()
message(STATUS "razorkv::kernels' ${ISA} object: every mergeable symbol is in isa_${ISA}")
