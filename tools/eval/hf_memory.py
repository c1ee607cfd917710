"""The process's memory when transformers generates over a long prompt with each cache: its own
DynamicCache (the full cache), razorkv.hf.RazorCache with the committed plan, and StreamingLLM
through the same class. Each cache runs in a fresh process (so that one run's freed memory does
not hide the next one's), on SmolLM2-135M loaded from its GGUF file in float32:

    build/venv-hf/bin/python tools/eval/hf_memory.py MODEL.gguf [--tokens 8192] [--new 32]

RSS is read from /proc/self/statm: after the model is loaded (the baseline), every 2 ms while
the prompt is prefilled and the answer decoded (the peak), and after decoding with the cache
still alive (the steady state: after glibc's malloc_trim, so that memory freed to the allocator
but kept by it does not count as held). Prints one markdown table; --json FILE writes the rows too.
Needs torch, transformers and gguf (python/requirements-hf.txt) and razorkv installed.
"""
import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import threading
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMITTED = os.path.join(SOURCE, "examples", "engine", "smollm2")
CACHES = ("full", "razor", "streaming_llm")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRss:
    """The largest RSS seen while the block runs, sampled every 2 ms by a thread."""

    def __enter__(self):
        self.peak, self._stop = rss_bytes(), threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def run_one(model_path, name, tokens, new):
    """One cache in this process: the row of the table, as a dict."""
    os.environ.setdefault("TQDM_DISABLE", "1")
    import numpy as np
    import torch
    import transformers

    import razorkv
    import razorkv.hf

    torch.set_num_threads(2)
    transformers.utils.logging.disable_progress_bar()
    folder, file = os.path.split(model_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=file, dtype=torch.float32).eval()
    ids = np.load(os.path.join(COMMITTED, "llama_cpp", "heldout_ids.npy"))[:tokens]
    prompt = torch.from_numpy(ids.astype(np.int64))[None]
    plan = razorkv.load_plan(os.path.join(COMMITTED, "plan.json"))
    if name == "full":
        model.set_attn_implementation("sdpa")
        cache = transformers.DynamicCache()
    elif name == "razor":  # C = 5 with S0 = 1,024: local heads keep a fifth of 8K tokens
        cache = razorkv.hf.RazorCache(plan, model, config=razorkv.RazorConfig(s0=1024))
    else:
        cache = razorkv.hf.RazorCache(razorkv.Policy.streaming_llm(), model, budget=1 / 3)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    baseline = rss_bytes()
    with torch.no_grad(), PeakRss() as peak:
        start = time.perf_counter()
        logits = model(prompt, past_key_values=cache, logits_to_keep=1).logits[0, -1]
        prefill = time.perf_counter() - start
        answer = [int(logits.argmax())]
        start = time.perf_counter()
        for _ in range(new - 1):
            step = torch.tensor([[answer[-1]]])
            answer.append(int(model(step, past_key_values=cache).logits[0, -1].argmax()))
        decode = (time.perf_counter() - start) / (new - 1)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    steady = rss_bytes()
    if name == "full":
        kv_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    else:
        kv_bytes = cache.kv_bytes()
    return {"cache": name, "tokens": tokens, "kv_bytes": kv_bytes,
            "baseline_rss": baseline, "peak_rss": peak.peak, "steady_rss": steady,
            "prefill_s": prefill, "decode_ms": 1e3 * decode, "answer": answer}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="SmolLM2-135M-Instruct.Q4_1.gguf (scripts/get_model.sh)")
    parser.add_argument("--tokens", type=int, default=8192, help="prompt tokens (default 8192)")
    parser.add_argument("--new", type=int, default=32, help="tokens decoded (default 32)")
    parser.add_argument("--caches", default=",".join(CACHES), help="of " + ", ".join(CACHES))
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process's cache
    args = parser.parse_args()
    if not 2 <= args.new or not 1 <= args.tokens <= 27000:
        parser.error(f"--new ({args.new}) must be >= 2 and --tokens ({args.tokens}) in "
                     "[1, 27000] (the held-out text's ids)")
    if args.one:
        print(json.dumps(run_one(args.model, args.one, args.tokens, args.new)))
        return
    rows = []
    for name in args.caches.split(","):
        if name not in CACHES:
            parser.error(f"--caches: unknown cache {name!r} (of {', '.join(CACHES)})")
        child = subprocess.run([sys.executable, __file__, args.model, "--one", name,
                                "--tokens", str(args.tokens), "--new", str(args.new)],
                               check=True, capture_output=True, text=True)
        rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
    mib = 1 << 20
    full = next((r for r in rows if r["cache"] == "full"), None)
    print(f"{args.tokens} prompt tokens, {args.new} decoded; RSS above the loaded model's, MiB\n")
    print("| cache | KV MiB | peak RSS | steady RSS | prefill s | decode ms/token | the full "
          "cache's tokens |")
    print("|---|--:|--:|--:|--:|--:|---|")
    for r in rows:
        same = "-" if full is None or r is full else str(r["answer"] == full["answer"]).lower()
        print(f"| {r['cache']} | {r['kv_bytes'] / mib:.1f} | "
              f"{(r['peak_rss'] - r['baseline_rss']) / mib:.0f} | "
              f"{(r['steady_rss'] - r['baseline_rss']) / mib:.0f} | {r['prefill_s']:.1f} | "
              f"{r['decode_ms']:.1f} | {same} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
