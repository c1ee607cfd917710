#!/usr/bin/env bash
# Publishes a trained model into examples/engine/model/ (or the folder given second): the 16-bit
# weights, PyTorch reference logits, the calibration by the C++ engine (scores.json, plan.json,
# heads.svg) and the cross-check: scores from PyTorch's attention through `razorkv score --attn`.
#   bash tools/train/publish.sh build/train/model.safetensors [examples/engine/model]
# Needs a build with tools and examples (build/dev, or RAZORKV_BUILD_DIR).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
weights="$1"
out="${2:-$root/examples/engine/model}"
build="${RAZORKV_BUILD_DIR:-$root/build/dev}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cmake --build "$build" --target razorkv_cli razorkv_trained_calibrate -j2 >/dev/null
mkdir -p "$out"
[ "$(realpath "$weights")" = "$(realpath -m "$out/model.safetensors")" ] || cp "$weights" "$out/model.safetensors"
# The engine's calibration: the probe's Q/K straight from the engine into razorkv's scorer.
"$build/examples/razorkv_trained_calibrate" "$out/model.safetensors" "$out" > "$out/calibration.txt"
# The same probe through PyTorch: attention probabilities per layer, scored by the CLI.
"$build/tools/razorkv" probe --period 256 --repeats 4 --vocab-max 256 --seed 0 --out "$work/probe.npy"
/usr/bin/python3 "$root/tools/train/export.py" --model "$out/model.safetensors" --out "$out" \
  --probe "$work/probe.npy" --attn-out "$work"
layers=$(ls "$work"/L*_attn.npy | wc -l)
attn_args=()
for ((l = 0; l < layers; ++l)); do attn_args+=(--attn "$work/L${l}_attn.npy"); done
kv_heads=$(/usr/bin/python3 -c "import json,sys; print(json.load(open('$out/scores.json'))['num_kv_heads'])")
"$build/tools/razorkv" score --period 256 --repeats 4 --kv-heads "$kv_heads" "${attn_args[@]}" \
  --out "$out/scores_from_torch.json" 2>/dev/null
"$build/tools/razorkv" heatmap --scores "$out/scores.json" --plan "$out/plan.json" --out "$out/heads.svg" 2>/dev/null
echo "publish: $out"
