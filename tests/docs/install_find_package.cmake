# docs/install.md's find_package block (install_find_package): configured and built against the
# copy the test suite installs (which has razorkv::kernels and razorkv::io).
cmake_minimum_required(VERSION 3.16)
project(install_find_package CXX)
add_executable(my_engine ${DOC_SNIPPET_SOURCE})
# @snippet
