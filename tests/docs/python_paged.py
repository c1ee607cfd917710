# docs/python.md's paged block (python_paged): decode over a sequence's pages, and a razor cache
# compressed from them, against the same tokens laid out in order.
import numpy as np

import razorkv

rng = np.random.default_rng(3)
layers, pages, page_size, kv_heads, dim, num_tokens = 2, 6, 16, 2, 32, 70
k_pools = [rng.standard_normal((pages, page_size, kv_heads, dim), dtype=np.float32)
           for _ in range(layers)]
v_pools = [rng.standard_normal((pages, page_size, kv_heads, dim), dtype=np.float32)
           for _ in range(layers)]
page_table = [4, 0, 5, 2, 1]
layer = 1
q = rng.standard_normal((4, dim), dtype=np.float32)
plan = razorkv.HeadPlan((layers, 4, kv_heads, dim))
cache = razorkv.RazorCache(plan, "float32", razorkv.RazorConfig(s0=16))
for other in range(layers):
    if other != layer:
        cache.compress_layer(other, k_pools[other][page_table].reshape(-1, kv_heads, dim)[:num_tokens],
                             v_pools[other][page_table].reshape(-1, kv_heads, dim)[:num_tokens])

# @snippet

in_order = razorkv.RazorCache(plan, "float32", razorkv.RazorConfig(s0=16))
for l in range(layers):
    in_order.compress_layer(l, k_pools[l][page_table].reshape(-1, kv_heads, dim)[:num_tokens],
                            v_pools[l][page_table].reshape(-1, kv_heads, dim)[:num_tokens])
np.testing.assert_allclose(cache.decode(layer, q), in_order.decode(layer, q), rtol=1e-5, atol=1e-6)
assert np.isfinite(out).all() and cache.dropped_tokens() > 0
print("python_paged: ok")
