"""llama.cpp's own KV-cache quantisation on razorkv's long-context prompts, scored the same way.

    python llama_cpp_kv.py MODEL.gguf PROMPTS.jsonl OUT.csv [--lengths 1024,2048]
        [--tasks single,multikey] [--needles number] [--caches f16,q8_0,q4_0]
    python llama_cpp_kv.py MODEL.gguf LIKELIHOOD.jsonl likelihood.csv --likelihood [--lengths ..]

Reads the prompts razorkv_smollm2_eval wrote (token ids, expected answers, answer limits), runs
each through llama.cpp (llama-cpp-python, pinned in tools/smollm2/requirements.txt) with flash
attention and the K and V cache types asked for, generates greedily with the evaluation's rules
(a control token ends the answer; so does a newline once a single-line answer has begun; at most
max_answer_tokens), and scores the answer whole: every expected string must appear in it.
Writes one row per prompt and cache type, with the cache's bytes as a fraction of its f16 size.

With --likelihood, reads the held-out likelihood trials razorkv_smollm2_eval wrote
(likelihood.jsonl) instead and writes razorkv's likelihood.csv columns: each trial's tokens are
teacher-forced through each cache type and the predictions after the prefix are scored as
razorkv scores them (NLL; KL from llama.cpp's own f16 cache, which must come first; the same top
token as f16), with the cache's bytes and its f16 size.
"""
import argparse
import csv
import math
import sys
import time

import llama_cpp
import numpy as np

import prompts as prompts_file  # tools/eval/prompts.py

# Bytes per element of each cache type: ggml's blocks of 32 (q8_0: 32 int8 + an f16 scale;
# q4_0: 16 bytes of nibbles + an f16 scale).
TYPES = {
    "f16": (llama_cpp.GGML_TYPE_F16, 2.0),
    "q8_0": (llama_cpp.GGML_TYPE_Q8_0, 34 / 32),
    "q4_0": (llama_cpp.GGML_TYPE_Q4_0, 18 / 32),
}


def answer(llm: llama_cpp.Llama, prompt: dict) -> str:
    llm.reset()
    llm.eval(prompt["ids"])
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    pieces, started = [], False
    for step in range(prompt["max_answer_tokens"]):
        logits = np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(llm.n_vocab(),))
        token = int(np.argmax(logits))
        if llama_cpp.llama_vocab_is_control(vocab, token):
            break
        piece = llm.detokenize([token])
        pieces.append(piece)
        if prompt["single_line"] and started and b"\n" in piece:
            break
        started = started or any(chr(c).isalnum() for c in piece if c < 128)
        if step + 1 < prompt["max_answer_tokens"]:
            llm.eval([token])
    return b"".join(pieces).decode("utf-8", errors="replace")


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise, in double: the KL of two close distributions is a small difference."""
    x = x.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def likelihood(model: str, trials: list, caches: list, out_path: str) -> None:
    """Perplexity, KL from f16 and agreement with f16 of each cache type on each trial."""
    if caches[0] != "f16":
        sys.exit("llama_cpp_kv.py: --likelihood needs f16 first in --caches (the KL's reference)")
    n_ctx = max(len(t["ids"]) for t in trials)
    llms = {c: llama_cpp.Llama(model, n_ctx=n_ctx, n_batch=512, n_threads=2, logits_all=True,
                               type_k=TYPES[c][0], type_v=TYPES[c][0], flash_attn=True,
                               verbose=False) for c in caches}
    first = next(iter(llms.values())).model
    # K and V of every layer: n_head_kv rows of n_embd / n_head values per token.
    per_token = (2 * llama_cpp.llama_model_n_layer(first) * llama_cpp.llama_model_n_head_kv(first)
                 * llama_cpp.llama_model_n_embd(first) // llama_cpp.llama_model_n_head(first))
    start = time.time()
    with open(out_path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["length", "trial", "policy", "kv_bytes", "full_bytes", "scored", "nll",
                         "kl", "agree"])
        for t in trials:
            ids, prefix = t["ids"], t["prefix"]
            # As razorkv scores: the predictions of ids[prefix + 1:], made at positions
            # prefix .. len - 2 (the prediction of ids[prefix] comes from the prefill alone).
            targets = np.array(ids[prefix + 1:])
            full = None
            for cache, llm in llms.items():
                llm.reset()
                llm.eval(ids)
                lp = log_softmax(llm.scores[prefix:len(ids) - 1])
                if full is None:
                    full = lp
                nll = -lp[np.arange(len(targets)), targets].sum()
                kl = (np.exp(full) * (full - lp)).sum()
                agree = (lp.argmax(axis=1) == full.argmax(axis=1)).sum()
                f16_bytes = per_token * prefix * 2
                writer.writerow([t["length"], t["trial"], f"llama.cpp {cache}",
                                 round(f16_bytes * TYPES[cache][1] / 2), f16_bytes, len(targets),
                                 f"{nll:.6g}", f"{kl:.6g}", int(agree)])
                out.flush()
                print(f"{cache} {t['length']} trial {t['trial']}: ppl "
                      f"{math.exp(nll / len(targets)):.3f} KL {kl / len(targets):.4f} "
                      f"({time.time() - start:.0f} s)", flush=True)
    print(f"wrote {out_path} in {time.time() - start:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("prompts")
    parser.add_argument("out")
    prompts_file.add_arguments(parser)
    parser.add_argument("--caches", default="f16,q8_0,q4_0")
    parser.add_argument("--likelihood", action="store_true",
                        help="PROMPTS is likelihood.jsonl: perplexity and KL, not answers")
    args = parser.parse_args()
    caches = args.caches.split(",")
    for c in caches:
        if c not in TYPES:
            sys.exit(f"llama_cpp_kv.py: cache type {c!r} is not one of {', '.join(TYPES)}")
    prompts = prompts_file.read(args.prompts, args, "llama_cpp_kv.py")
    if args.likelihood:
        likelihood(args.model, prompts, caches, args.out)
        return
    n_ctx = max(p["length"] + p["max_answer_tokens"] for p in prompts)
    start = time.time()
    with open(args.out, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["length", "task", "needle", "depth", "rep", "cache", "kv_fraction",
                         "correct", "generated", "expected"])
        for cache in caches:
            kind, size = TYPES[cache]
            llm = llama_cpp.Llama(args.model, n_ctx=n_ctx, n_batch=512, n_threads=2,
                                  type_k=kind, type_v=kind, flash_attn=True, verbose=False)
            for p in prompts:
                text = answer(llm, p)
                correct = all(e in text for e in p["expected"])
                writer.writerow([p["length"], p["task"], p["needle"], p["depth"], p["rep"],
                                 f"llama.cpp {cache}", f"{size / 2.0:.4f}", int(correct), text,
                                 "|".join(p["expected"])])
                out.flush()
                print(f"{cache} {p['length']} {p['task']} {p['needle']} {p['depth']}: "
                      f"{int(correct)} {text!r} ({time.time() - start:.0f} s)", flush=True)
            del llm
    print(f"wrote {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
