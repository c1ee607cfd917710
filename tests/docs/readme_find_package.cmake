# The README's find_package block (readme_find_package, spliced in by scripts/doc_snippets.py):
# configured and built against the copy the test suite installs.
cmake_minimum_required(VERSION 3.16)
project(readme_find_package CXX)
add_executable(my_engine ${DOC_SNIPPET_SOURCE})
# @snippet
