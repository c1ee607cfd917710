# The README's transformers block (hf_readme, spliced in by scripts/doc_snippets.py), run from the
# repository root by scripts/check_pip_install.sh --hf (transformers is not in Debian's Python):
# SmolLM2 from build/models, calibrated in one call, asked for a passphrase hidden at 40% of
# 3,000 words of held-out text; the razor cache must recall it at a third of the full cache's bytes.
import os

os.environ.setdefault("TQDM_DISABLE", "1")
os.chdir(os.environ["RAZORKV_SOURCE_DIR"])
with open("examples/engine/smollm2/heldout.txt", encoding="utf-8") as f:
    words = f.read().split()[:3000]
words.insert(1200, "\nThe secret passphrase is pepper-amber-7828.\n")
chat = [{"role": "user", "content": " ".join(words)},
        {"role": "user", "content": "What is the secret passphrase in the text above?"},
        {"role": "assistant", "content": "The secret passphrase is"}]

# @snippet

assert "pepper-amber-7828" in answer, answer
assert cache.razorkv_cache.dropped_tokens() > 0
assert cache.kv_bytes() < 0.35 * cache.dense_kv_bytes(), cache.kv_bytes() / cache.dense_kv_bytes()
print("hf_readme: ok")
