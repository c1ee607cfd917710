# Flags for razorkv's own targets (tests, benchmarks, examples), applied PRIVATE per target:
# the INTERFACE target razorkv::razorkv never carries warnings, -march or sanitizers.

# razorkv_dev_target(<target> [WARNINGS] [NO_NATIVE_ARCH] [KERNELS]): native arch (unless
# NO_NATIVE_ARCH: a target that sets its own) and sanitizers as configured; with WARNINGS also
# -Wall -Wextra -Wpedantic -Wsign-conversion (and -Werror under RAZORKV_WARNINGS_AS_ERRORS); with
# KERNELS razorkv::kernels where the build has it, as the README advises an engine: the kernels
# compiled once and picked for the CPU at run time, so that the target's units do not instantiate
# every kernel themselves. -Wsign-conversion is what the library's index_t -> std::size_t
# casts are written for: a signed extent reaching an unsigned size unnoticed is how a negative
# argument turns into a huge allocation.
function(razorkv_dev_target target)
  cmake_parse_arguments(ARG "WARNINGS;NO_NATIVE_ARCH;KERNELS" "" "" ${ARGN})
  if(ARG_KERNELS AND TARGET razorkv_kernels)
    target_link_libraries(${target} PRIVATE razorkv::kernels)
  endif()
  if(ARG_WARNINGS AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wsign-conversion)
    if(RAZORKV_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND (RAZORKV_NATIVE_ARCH OR ARG_NO_NATIVE_ARCH))
      # GCC 12's avx512fintrin.h reads _mm512_undefined_ps() (a self-initialised value) and
      # warns about it inside Eigen's and razorkv's AVX-512 code (as maybe-uninitialized, and at
      # -O2 with Eigen's vectorised exp as uninitialized); the warning is GCC's, not ours.
      target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized -Wno-uninitialized)
    endif()
  endif()
  if(RAZORKV_NATIVE_ARCH AND NOT ARG_NO_NATIVE_ARCH)
    target_compile_options(${target} PRIVATE -march=native)
  endif()
  if(RAZORKV_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-sanitize-recover=all
                                             -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(RAZORKV_SANITIZE_THREAD)
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
endfunction()
