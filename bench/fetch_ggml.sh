#!/usr/bin/env bash
# Downloads the ggml sources razorkv_bench compares decode against, and prints the directory to
# pass as -DRAZORKV_GGML_SOURCE_DIR. ggml is not a dependency of razorkv: it is only the bar.
#
# The sources come from Python's package index, as the source distribution of llama-cpp-python
# (the version tools/smollm2 pins), which vendors llama.cpp and its ggml; the archive is checked
# against its SHA-256 below. pip fetches it (pip's isolated build reads the package's metadata,
# which takes about a minute); nothing is built or installed.
#
# usage: bash bench/fetch_ggml.sh [DEST]     (DEST defaults to build/ggml)
set -euo pipefail

readonly version=0.3.36
readonly sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
dest=${1:-build/ggml}
source "$(dirname "$0")/../scripts/common.sh"
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
unpacked="$dest/llama-cpp-python-$version"
if [[ ! -f "$unpacked/ggml/src/ggml-cpu/ops.cpp" ]]; then
  archive="$dest/llama_cpp_python-$version.tar.gz"
  if [[ ! -f "$archive" ]]; then
    python3 -m pip --version >/dev/null 2>&1 || razorkv_require_packages python3-pip >&2
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$dest" \
      "llama-cpp-python==$version" >&2 || razorkv_fail "pip could not fetch llama-cpp-python $version"
  fi
  echo "$sha256  $archive" | sha256sum --check --quiet >&2 \
    || razorkv_fail "$archive does not have the SHA-256 this script pins"
  rm -rf "$unpacked" && mkdir -p "$unpacked"
  tar -xzf "$archive" -C "$unpacked" --strip-components=3 \
    "llama_cpp_python-$version/vendor/llama.cpp/ggml" \
    || razorkv_fail "$archive holds no vendor/llama.cpp/ggml"
fi
echo "$unpacked/ggml"
