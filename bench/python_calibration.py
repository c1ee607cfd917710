#!/usr/bin/env python3
"""Times calibrating the trained model (examples/engine/model) two ways, medians in one run:
in-process with razorkv.torch, and through .npy dumps of the same post-RoPE Q/K scored by the
razorkv CLI (`score`, then `select`). Also the model's forward alone and razorkv's scoring alone.
  PYTHONPATH=<build>/python python3 bench/python_calibration.py <build>/tools/razorkv [repetitions]
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

import razorkv
import razorkv.torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
from model import apply_rope, load_safetensors  # noqa: E402


def qk(attn, inputs, output):
    """The post-RoPE queries and keys of tools/train/model.py's Attention.forward(x, cos, sin)."""
    x, cos, sin = inputs[:3]
    b, t, _ = x.shape
    q = attn.wq(x).view(b, t, attn.cfg.num_q_heads, -1).transpose(1, 2)
    k = attn.wk(x).view(b, t, attn.cfg.num_kv_heads, -1).transpose(1, 2)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


def via_dumps(cli, model, probe, modules):
    """The same calibration through files: dump each layer's Q/K, `razorkv score`, `select`.
    Returns the CLI's peak resident memory in KiB (score)."""
    captured = []
    hooks = [m.register_forward_hook(lambda m, i, o: captured.append(
        [x[0].transpose(0, 1).contiguous() for x in qk(m, i, o)])) for m in modules]
    with torch.no_grad():
        model(torch.from_numpy(probe.tokens.copy())[None])
    for h in hooks:
        h.remove()
    with tempfile.TemporaryDirectory() as tmp:
        args = [cli, "score", "--period", str(probe.period), "--repeats", str(probe.repeats),
                "--out", os.path.join(tmp, "scores.json")]
        for layer, (q, k) in enumerate(captured):
            for name, x in (("q", q), ("k", k)):
                path = os.path.join(tmp, f"{name}{layer}.npy")
                np.save(path, x.numpy())
                args += [f"--{name}", path]
        run = subprocess.run(["/usr/bin/time", "-f", "%M"] + args, capture_output=True,
                             text=True, check=True)
        subprocess.run([cli, "select", "--scores", os.path.join(tmp, "scores.json"), "--out",
                        os.path.join(tmp, "plan.json")], check=True, capture_output=True)
    return int(run.stderr.strip().splitlines()[-1])


def median_ms(f, repetitions):
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main():
    cli = sys.argv[1]
    repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    torch.set_num_threads(2)
    model = load_safetensors(os.path.join(ROOT, "examples/engine/model/model.safetensors")).eval()
    cfg = model.cfg
    probe = razorkv.Probe(period=cfg.vocab_size, repeats=4, vocab_max=cfg.vocab_size)
    modules = [b.attn for b in model.blocks]
    tokens = torch.from_numpy(probe.tokens.copy())[None]
    q = torch.randn(len(probe), cfg.num_q_heads, cfg.head_dim)
    k = torch.randn(len(probe), cfg.num_kv_heads, cfg.head_dim)

    def forward():
        with torch.no_grad():
            model(tokens)

    in_process = median_ms(lambda: razorkv.torch.calibrate(model, probe, modules, qk,
                                                           head_dim=cfg.head_dim), repetitions)
    cli_kib = []
    dumps = median_ms(lambda: cli_kib.append(via_dumps(cli, model, probe, modules)), repetitions)
    forward_ms = median_ms(forward, repetitions)
    scoring = median_ms(lambda: [razorkv.score_queries_keys(probe, q, k) for _ in modules],
                        repetitions)
    print(f"{len(probe)}-token probe, {len(modules)} layers, medians of {repetitions}:")
    print(f"  in-process (razorkv.torch.calibrate): {in_process:.0f} ms")
    print(f"  via .npy dumps + razorkv score/select: {dumps:.0f} ms ({dumps / in_process:.2f}x)")
    print(f"  the model's forward alone: {forward_ms:.0f} ms; razorkv scoring of every layer: "
          f"{scoring:.0f} ms")
    print(f"  peak memory: this Python process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB, "
          f"razorkv score {max(cli_kib) / 1024:.1f} MiB")


if __name__ == "__main__":
    main()
