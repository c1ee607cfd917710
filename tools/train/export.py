#!/usr/bin/env python3
# Writes what the C++ engine is checked against: PyTorch logits of a fixed prompt under the
# committed 16-bit weights, and (for the calibration cross-check) each layer's attention
# probabilities on razorkv's probe, which `razorkv score --attn` turns into head scores.
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_safetensors  # noqa: E402

# Code with repeated identifiers, then a repeated random-looking line: exercises every head.
REFERENCE_PROMPT = (
    "def scale(values, factor):\n"
    "    scaled = [value * factor for value in values]\n"
    "    return scaled\n\n"
    "key 4821: value 93017\n"
    "result = scale([1, 2, 3], 4)\n"
    "key 4821: value 93017\n"
)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="model.safetensors")
    parser.add_argument("--out", required=True, help="folder for reference_tokens.npy and reference_logits.npy")
    parser.add_argument("--probe", help="probe.npy from `razorkv probe`: also dump the probe's attention")
    parser.add_argument("--attn-out", help="folder for L<layer>_attn.npy ([query heads, L, L] float32)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = load_safetensors(args.model).eval()
    tokens = torch.tensor([list(REFERENCE_PROMPT.encode())], dtype=torch.int64)
    with torch.no_grad():
        logits = model(tokens)[0]
    os.makedirs(args.out, exist_ok=True)
    np.save(os.path.join(args.out, "reference_tokens.npy"), tokens[0].numpy())
    np.save(os.path.join(args.out, "reference_logits.npy"), logits.numpy().astype(np.float32))
    print(f"export: reference logits of {tokens.shape[1]} tokens written to {args.out}")
    if args.probe:
        probe = torch.from_numpy(np.load(args.probe).astype(np.int64))[None]
        capture = []
        with torch.no_grad():
            model(probe, capture)
        os.makedirs(args.attn_out, exist_ok=True)
        for layer, c in enumerate(capture):
            np.save(os.path.join(args.attn_out, f"L{layer}_attn.npy"), c["probs"][0].numpy().astype(np.float32))
        print(f"export: probe attention of {len(capture)} layers written to {args.attn_out}")


if __name__ == "__main__":
    main()
