# docs/hf.md's block of caches (hf_policies, spliced in by scripts/doc_snippets.py), run by
# scripts/check_pip_install.sh --hf (transformers is not in Debian's Python) on a random 2-layer
# GQA Llama and a 150-token prompt: every cache must generate, and hold what its budget says.
import os

os.environ.setdefault("TQDM_DISABLE", "1")
import torch  # noqa: E402
import transformers  # noqa: E402

import razorkv  # noqa: E402
import razorkv.hf  # noqa: E402

config = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=1024,
                                  pad_token_id=0)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).eval()
ids = torch.randint(1, 300, (1, 150))
plan = razorkv.HeadPlan(razorkv.hf.model_shape(model))
plan.set_retrieval(1, 0)

# @snippet

for name, cache in caches.items():
    share = cache.kv_bytes() / cache.dense_kv_bytes()
    assert cache.get_seq_length() == 157, (name, cache.get_seq_length())
    assert share < 0.5 if name == "razor" else abs(share - 1 / 3) < 0.08, (name, share)
print("hf_policies: ok")
