"""llama.cpp's view of SmolLM2 on fixed prompts: the reference the C++ engine is checked against.

    python llama_cpp_reference.py MODEL.gguf OUT_DIR

Runs the GGUF file through llama-cpp-python (pinned in tools/smollm2/requirements.txt, built by
pip) and writes compact .npy files that the engine's test reads, so that CI checks the engine
without building llama.cpp:
  heldout_ids.npy        the ids llama.cpp's tokenizer gives the whole held-out corpus
  tokenizer_samples.txt  short texts beyond the corpus (digits, Unicode, spaces), one per line,
  tokenizer_samples.npy  and their ids, -1 ending each text's ids
  prompt_tokens.npy      the three prompts' ids (64, 1,024 and 4,096 tokens of the corpus), -1 padded
  top_ids.npy            per prompt and position, llama.cpp's 32 most likely next tokens
  top_logprobs.npy       and their log-probabilities (float32), log-softmax over the whole vocabulary
  last_logits.npy        the full logits at each prompt's last position
  greedy.npy             64 tokens generated greedily after each prompt
  greedy_top_ids.npy     llama.cpp's 32 most likely tokens before each generated token,
  greedy_top_logprobs.npy  and their log-probabilities
llama.cpp keeps its KV cache in f32 here (type_k = type_v = 0), so that what remains between the
two engines is llama.cpp's quantised activations in its matrix products.
"""
import sys
from pathlib import Path

import llama_cpp
import numpy as np

PROMPTS = [(1000, 64), (5000, 1024), (10000, 4096)]  # (first token in the corpus, length)
TOP = 32
GENERATE = 64
SAMPLES = [
    "Hello world, the year 2024 was 12.5% better. Don't  stop!",
    "  leading spaces, trailing tabs\t\t\nand\n\n\nnewlines   ",
    "Zürich café naïve — “quotes” … 東京 ١٢٣ ½ emoji 🙂 ok",
    "we'll they're I've it'd she's don't WE'LL 3.14159 1,000,000 x=y+z; f(a[i]) != g{b}",
]


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main() -> None:
    model, out = sys.argv[1], Path(sys.argv[2])
    repo = Path(__file__).resolve().parents[2]
    text = (repo / "examples/engine/smollm2/heldout.txt").read_text(encoding="utf-8")
    n_ctx = max(length for _, length in PROMPTS) + GENERATE
    llm = llama_cpp.Llama(model, n_ctx=n_ctx, n_batch=512, logits_all=True, n_threads=2,
                          type_k=0, type_v=0, verbose=False)

    def tokenize(s: str) -> list:
        return llm.tokenize(s.encode("utf-8"), add_bos=False, special=False)

    ids = np.array(tokenize(text), dtype=np.int32)
    np.save(out / "heldout_ids.npy", ids)
    (out / "tokenizer_samples.txt").write_text("\n".join(s.replace("\n", "\\n").replace("\t", "\\t")
                                                         for s in SAMPLES) + "\n", encoding="utf-8")
    sample_ids = []
    for s in SAMPLES:
        sample_ids += tokenize(s) + [-1]
    np.save(out / "tokenizer_samples.npy", np.array(sample_ids, dtype=np.int32))

    longest = max(length for _, length in PROMPTS)
    prompt_tokens = np.full((len(PROMPTS), longest), -1, dtype=np.int32)
    top_ids = np.zeros((len(PROMPTS), longest, TOP), dtype=np.int32)
    top_logprobs = np.zeros((len(PROMPTS), longest, TOP), dtype=np.float32)
    last_logits = np.zeros((len(PROMPTS), llm.n_vocab()), dtype=np.float32)
    greedy = np.zeros((len(PROMPTS), GENERATE), dtype=np.int32)
    greedy_top_ids = np.zeros((len(PROMPTS), GENERATE, TOP), dtype=np.int32)
    greedy_top_logprobs = np.zeros((len(PROMPTS), GENERATE, TOP), dtype=np.float32)
    for p, (first, length) in enumerate(PROMPTS):
        tokens = ids[first:first + length].tolist()
        assert len(tokens) == length, "the corpus is too short for the prompts"
        prompt_tokens[p, :length] = tokens
        llm.reset()
        llm.eval(tokens)
        logits = np.array(llm.scores[:length], dtype=np.float32)
        lp = log_softmax(logits)
        order = np.argsort(-lp, axis=-1, kind="stable")[:, :TOP]
        top_ids[p, :length] = order
        top_logprobs[p, :length] = np.take_along_axis(lp, order, axis=-1)
        last_logits[p] = logits[-1]
        for g in range(GENERATE):
            step = log_softmax(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32))
            order = np.argsort(-step, kind="stable")[:TOP]
            greedy_top_ids[p, g] = order
            greedy_top_logprobs[p, g] = step[order]
            nxt = int(order[0])
            greedy[p, g] = nxt
            llm.eval([nxt])
        print(f"prompt {p}: {length} tokens; greedy: {llm.detokenize(greedy[p].tolist())[:80]!r}")
    for name, array in [("prompt_tokens", prompt_tokens), ("top_ids", top_ids),
                        ("top_logprobs", top_logprobs), ("last_logits", last_logits),
                        ("greedy", greedy), ("greedy_top_ids", greedy_top_ids),
                        ("greedy_top_logprobs", greedy_top_logprobs)]:
        np.save(out / f"{name}.npy", array)
    print(f"corpus: {len(text)} characters, {ids.size} tokens; wrote {out}")


if __name__ == "__main__":
    main()
