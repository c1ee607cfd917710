#!/usr/bin/env python3
# Trains the razorkv tiny model on CPU with a curriculum (repetition first, then text with
# repetition mixed in, then the full context), logging the copy probe; resumable from a checkpoint.
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import Corpus, batch  # noqa: E402
from model import Config, Model, save_safetensors  # noqa: E402

SEED = 20261203
CONFIG = Config(vocab_size=256, d_model=128, num_layers=4, num_q_heads=4, num_kv_heads=2,
                ffn_hidden=384, max_context=2048)
TEXT_MIX = {"text": 0.35, "random_repeat_in_text": 0.2, "passage_repeat": 0.25, "key_value": 0.2}
# (name, context, batch, steps, peak learning rate, mix). Phase "induction" ends early once the
# copy probe passes 0.9 (the circuit forms abruptly after a plateau).
PHASES = [
    ("induction", 256, 32, 1500, 2e-3, {"random_repeat": 0.9, "text": 0.1}),
    ("text-512", 512, 16, 600, 1.5e-3, TEXT_MIX),
    ("text-1024", 1024, 8, 250, 1e-3, TEXT_MIX),
    ("text-2048", 2048, 4, 160, 6e-4, TEXT_MIX),
]
WARMUP = 50


def lr_at(step_in_phase, steps, peak):
    if step_in_phase < WARMUP:
        return peak * (step_in_phase + 1) / WARMUP
    progress = (step_in_phase - WARMUP) / max(1, steps - WARMUP)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def copy_probe(model, heldout, length):
    """Greedy next-token accuracy and loss inside the second copy of a random run (half the
    sequence), and held-out text loss in bits per byte; fixed seeds, so comparable across steps."""
    model.eval()
    rng = np.random.default_rng(7)
    half = length // 2
    runs = rng.integers(0, 256, size=(8, half))
    seq = torch.from_numpy(np.concatenate([runs, runs], axis=1))
    logits = model(seq[:, :-1])
    target = seq[:, 1:]
    second = slice(half, length - 1)
    acc = (logits[:, second].argmax(-1) == target[:, second]).float().mean().item()
    rep_loss = F.cross_entropy(logits[:, second].reshape(-1, 256), target[:, second].reshape(-1)).item()
    text = torch.from_numpy(np.stack([heldout.window(np.random.default_rng(100 + i), length + 1) for i in range(8)]))
    text_logits = model(text[:, :-1])
    bpb = F.cross_entropy(text_logits.reshape(-1, 256), text[:, 1:].reshape(-1)).item() / math.log(2)
    model.train()
    return acc, rep_loss, bpb


def save_checkpoint(path, model, optimizer, state):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state,
                "config": model.cfg.to_dict()}, tmp)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", required=True, help="folder written by corpus.py")
    parser.add_argument("--out", required=True, help="folder for the checkpoint, the log and the weights")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--checkpoint-minutes", type=float, default=5.0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    train = Corpus(os.path.join(args.corpus, "train.bin"))
    heldout = Corpus(os.path.join(args.corpus, "heldout.bin"))
    ckpt_path = os.path.join(args.out, "checkpoint.pt")
    log_path = os.path.join(args.out, "train_log.tsv")

    torch.manual_seed(SEED)
    model = Model(CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    state = {"phase": 0, "step_in_phase": 0, "step": 0, "tokens": 0, "seconds": 0.0,
             "rng": np.random.default_rng(SEED).bit_generator.state}
    if os.path.exists(ckpt_path):
        saved = torch.load(ckpt_path)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        print(f"train: resumed at step {state['step']} (phase {PHASES[state['phase']][0]})", flush=True)
    else:
        with open(log_path, "w") as log:
            log.write("step\tphase\tcontext\ttokens\tminutes\tlr\ttrain_loss\tcopy_acc\trepeat_loss\theldout_bpb\n")
    rng = np.random.default_rng()
    rng.bit_generator.state = state["rng"]

    last_save = time.time()
    started = time.time() - state["seconds"]
    losses = []
    while state["phase"] < len(PHASES):
        name, context, size, steps, peak, mix = PHASES[state["phase"]]
        lr = lr_at(state["step_in_phase"], steps, peak)
        for group in optimizer.param_groups:
            group["lr"] = lr
        seq = torch.from_numpy(batch(rng, train, size, context, mix))
        logits = model(seq[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, 256), seq[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        state["step"] += 1
        state["step_in_phase"] += 1
        state["tokens"] += size * context
        state["seconds"] = time.time() - started
        done = state["step_in_phase"] >= steps
        if state["step"] % 50 == 0 or done:
            acc, rep_loss, bpb = copy_probe(model, heldout, min(context, 512))
            with open(log_path, "a") as log:
                log.write(f"{state['step']}\t{name}\t{context}\t{state['tokens']}\t{state['seconds'] / 60:.1f}\t"
                          f"{lr:.2e}\t{np.mean(losses):.4f}\t{acc:.4f}\t{rep_loss:.4f}\t{bpb:.4f}\n")
            print(f"step {state['step']} {name} loss {np.mean(losses):.3f} copy {acc:.3f} "
                  f"repeat-loss {rep_loss:.3f} heldout {bpb:.3f} bpb {state['seconds'] / 60:.1f} min", flush=True)
            losses = []
            if name == "induction" and acc >= 0.9:
                done = True
        if done:
            state["phase"] += 1
            state["step_in_phase"] = 0
        state["rng"] = rng.bit_generator.state
        if done or time.time() - last_save > args.checkpoint_minutes * 60:
            save_checkpoint(ckpt_path, model, optimizer, state)
            last_save = time.time()
            if done:
                save_safetensors(model, os.path.join(args.out, f"after-{name}.safetensors"))
    save_safetensors(model, os.path.join(args.out, "model.safetensors"))
    print(f"train: done, {state['step']} steps, {state['tokens']} tokens, {state['seconds'] / 60:.1f} min")


if __name__ == "__main__":
    main()
