# docs/python.md's first block (python_cache, spliced in by scripts/doc_snippets.py), run from the
# repository root on random K/V of the trained model's shape: the cache must compress, and decode
# as a razor cache of the C++ library does (checked against the numpy softmax over its entries
# in tests/python/test_module.py; here, that it runs and drops what it says).
import os

import numpy as np

os.chdir(os.environ["RAZORKV_SOURCE_DIR"])
rng = np.random.default_rng(1)
keys = rng.standard_normal((4, 2048, 2, 32), dtype=np.float32)
values = rng.standard_normal((4, 2048, 2, 32), dtype=np.float32)
q = rng.standard_normal((4, 32), dtype=np.float32)

# @snippet

assert out.shape == (4, 32) and np.isfinite(out).all(), out
assert cache.dropped_tokens() > 0
assert cache.kv_bytes() < 0.5 * cache.dense_kv_bytes(), cache.compression_ratio()
print("python_cache: ok")
