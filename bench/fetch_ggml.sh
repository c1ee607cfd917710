#!/usr/bin/env bash
# Downloads the ggml sources razorkv_bench compares decode against, and prints the directory to
# pass as -DRAZORKV_GGML_SOURCE_DIR. ggml is not a dependency of razorkv: it is only the bar.
#
# The sources come from the npm registry, as the package llama.rn (a React Native binding that
# carries a copy of llama.cpp's C/C++ sources, ggml's CPU backend included, with every symbol
# prefixed lm_). npm checks the tarball against the registry's sha512 integrity.
#
# usage: bash bench/fetch_ggml.sh [DEST]     (DEST defaults to build/ggml)
set -euo pipefail

readonly version=0.12.9
dest=${1:-build/ggml}
command -v npm >/dev/null || {
  source "$(dirname "$0")/../scripts/common.sh"
  razorkv_require_packages npm
}
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)
unpacked="$dest/llama.rn-$version"
if [[ ! -f "$unpacked/cpp/ggml-cpu/ops.cpp" ]]; then
  (cd "$dest" && npm pack --silent "llama.rn@$version" >/dev/null)
  rm -rf "$unpacked" && mkdir -p "$unpacked"
  tar -xzf "$dest/llama.rn-$version.tgz" -C "$unpacked" --strip-components=1 package/cpp
fi
echo "$unpacked/cpp"
