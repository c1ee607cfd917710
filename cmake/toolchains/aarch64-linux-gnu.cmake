# cmake/toolchains/aarch64-linux-gnu.cmake: razorkv built for 64-bit Arm (NEON) on an x86-64
# Debian machine with its cross compiler (g++-aarch64-linux-gnu), its tests run under qemu-user.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Libraries come from the cross C library's tree; header-only packages (Eigen, nlohmann-json)
# and their CMake files from the host's /usr, which serve any target.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# CTest (and gtest_discover_tests) run the test binaries through the emulator, which finds the
# Arm dynamic loader and libraries under -L.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
