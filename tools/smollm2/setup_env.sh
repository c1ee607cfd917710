#!/usr/bin/env bash
# Creates build/venv-smollm2 with tools/smollm2/requirements.txt (pip builds llama.cpp from the
# llama-cpp-python sources: about 4.5 minutes on 2 cores), then regenerates what tools/smollm2/
# commits when asked:
#   bash tools/smollm2/setup_env.sh             the environment only
#   bash tools/smollm2/setup_env.sh reference   and examples/engine/smollm2/{gguf_tensors.tsv,llama_cpp/}
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

razorkv_require_packages python3 python3-venv cmake make g++
venv="$razorkv_root/build/venv-smollm2"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv" || razorkv_fail "cannot create $venv"
fi
"$venv/bin/pip" install --quiet -r "$razorkv_root/tools/smollm2/requirements.txt" \
  || razorkv_fail "pip install -r tools/smollm2/requirements.txt failed"
[ "${1:-}" = reference ] || exit 0
model="$(bash "$razorkv_root/scripts/get_model.sh")"
out="$razorkv_root/examples/engine/smollm2"
"$venv/bin/python" "$razorkv_root/tools/smollm2/gguf_hashes.py" "$model" >"$out/gguf_tensors.tsv"
"$venv/bin/python" "$razorkv_root/tools/smollm2/llama_cpp_reference.py" "$model" "$out/llama_cpp"
