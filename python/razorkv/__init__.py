"""razorkv: RazorAttention KV-cache compression, from Python.

Calibration (a probe, echo and induction scores of every head, the retrieval heads a plan keeps
whole; for ALiBi models, plans from the slopes alone), plan files in every format razorkv reads,
the memory calculator, the compressed cache and the baseline policies, on the heap or on a
HugePageResource that an engine keeps as its KV pool, and an engine's paged K/V (PagedKV) read
in place, to attend over or to compress a prompt from. Arrays are numpy arrays or PyTorch CPU
tensors, read in place when their layout allows (last axis contiguous); bfloat16 tensors too.
razorkv.torch calibrates a PyTorch model in-process; razorkv.hf calibrates a Hugging Face
transformers model in one call and generates over a razorkv cache. GgufFile reads a GGUF model file (metadata,
tensors dequantised to float32). Errors are razorkv.Error (a ValueError) with razorkv's message.
"""

import numpy as _np

from ._razorkv import (  # noqa: F401  (the public names of the C++ core)
    Error,
    GgufFile,
    HeadPlan,
    HeadScores,
    HugePageResource,
    Policy,
    Probe,
    RazorConfig,
    __version__,
    alibi_logit_bound,
    alibi_slopes,
    alibi_span,
    compressed_kv_bytes,
    full_kv_bytes,
    model_presets,
    select,
    select_alibi,
    select_for_budget,
)
from . import _razorkv

__all__ = [
    "Cache", "Error", "GgufFile", "HeadPlan", "HeadScores", "HugePageResource", "PagedKV",
    "Policy", "Probe", "RazorCache", "RazorConfig",
    "alibi_logit_bound", "alibi_slopes", "alibi_span", "compress", "compressed_kv_bytes",
    "full_kv_bytes", "load_plan", "load_scores", "model_presets", "save_plan", "save_scores",
    "score_probabilities", "score_queries_keys", "select", "select_alibi", "select_for_budget",
]


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _storage(x, name):
    """(numpy array over x's memory, declared dtype): torch CPU tensors without a copy,
    bfloat16 as its 16-bit pattern; anything else through numpy.asarray."""
    if _is_torch(x):
        import torch

        if x.device.type != "cpu":
            raise Error(f"{name}: a {x.device.type} tensor; razorkv reads CPU memory (use .cpu())")
        x = x.detach()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy(), "bfloat16"
        return x.numpy(), ""
    return _np.asarray(x), ""


_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _dtype_name(dtype, where):
    """The storage dtype's name from a name, a numpy dtype or type, or a torch dtype."""
    if isinstance(dtype, str):
        name = dtype
    elif type(dtype).__module__.startswith("torch"):  # torch.float32 prints as "torch.float32"
        name = str(dtype).rpartition(".")[2]
    else:
        try:
            name = _np.dtype(dtype).name
        except TypeError:
            raise Error(f"{where}: dtype must be one of {', '.join(_DTYPES)} (a name, a numpy "
                        f"or a torch dtype), got a {type(dtype).__name__}") from None
    if name not in _DTYPES:
        raise Error(f"{where}: dtype ({dtype!r}) is not one razorkv stores: {', '.join(_DTYPES)}")
    return name


def _float32(x):
    """x as float32 numpy (a copy only when it is not float32 already)."""
    if _is_torch(x):
        import torch

        return x.detach().to(torch.float32).numpy()
    return _np.asarray(x, dtype=_np.float32)


def _like(result, reference):
    """The result as a torch tensor when the input was one."""
    if _is_torch(reference):
        import torch

        return torch.from_numpy(result)
    return result


# ---- calibration ------------------------------------------------------------------------------


def score_queries_keys(probe, queries, keys, *, scale=None, alibi_slopes=None, row_step=1):
    """Echo and induction score of every query head of one layer from its post-RoPE queries
    [L, query heads, head_dim] and keys [L, kv heads, head_dim] on the probe (L = len(probe)),
    without the L x L attention matrix. Returns (echo, induction), float64 arrays."""
    q, q_dtype = _storage(queries, "queries")
    k, k_dtype = _storage(keys, "keys")
    if q.dtype != k.dtype or q_dtype != k_dtype:  # one dtype for both: widen the narrower
        q, q_dtype = _float32(queries), ""
        k, k_dtype = _float32(keys), ""
    return _razorkv._score_queries_keys(probe, q, q_dtype, k, k_dtype, scale,
                                        list(alibi_slopes or []), row_step)


def score_probabilities(probe, probabilities, *, row_sum_tolerance=1e-2, row_step=1):
    """Echo and induction scores from attention probabilities [heads, L, L] (rows sum to 1)."""
    p, p_dtype = _storage(probabilities, "probabilities")
    return _razorkv._score_probabilities(probe, p, p_dtype, row_sum_tolerance, row_step)


def _read_text(path):
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def save_scores(scores, path, *, head_dim=0):
    """Writes scores.json (what `razorkv score` writes and `razorkv select` reads); a head_dim
    > 0 is recorded for `razorkv select`."""
    _write_text(path, scores.to_json(head_dim))


def load_scores(path):
    """The HeadScores a scores.json holds (save_scores or `razorkv score` wrote it)."""
    return HeadScores.from_json(_read_text(path))


def load_plan(path, *, format="auto", shape=None, threshold=0.5, sparsity=None):
    """A plan from razorkv JSON, mindspore_gs JSON or a DuoAttention TSV (format "auto"
    recognises which). The last two do not carry the model's shape: give shape =
    (num_layers, num_query_heads, num_kv_heads, head_dim). DuoAttention gates become retrieval
    heads above `threshold`, or the top (1 - sparsity) share when sparsity is given."""
    return HeadPlan.parse(_read_text(path), format=format, shape=shape, threshold=threshold,
                          sparsity=sparsity)


def save_plan(plan, path, format="razorkv"):
    """Writes the plan as razorkv JSON, mindspore_gs JSON or DuoAttention TSV (gates 1/0)."""
    _write_text(path, plan.format(format))


# ---- caches --------------------------------------------------------------------------------------


class _Attends:
    """What every K/V source offers: decode and prefill attention over it, its dtype and shape."""

    def decode(self, layer, queries, *, scale=None, check_finite=True):
        """Attention of one query per query head over one layer.

        layer: the layer's index. queries: [query heads, head_dim], any float dtype (read as
        float32), numpy or a torch CPU tensor. scale: multiplies q.k before the softmax
        (default 1/sqrt(head_dim)). check_finite: a NaN or infinity in the queries or in the
        layer's K/V raises razorkv.Error naming it (the default; it reads the K/V once more),
        where False lets it reach the output as IEEE arithmetic does (an engine's hot loop).
        Returns [query heads, head_dim] float32 (a torch tensor for a torch query).
        """
        q = _float32(queries)
        if q.ndim != 2:
            raise Error(f"decode: queries must be [query heads, head_dim], have shape {q.shape}")
        return _like(self._cache.attend(layer, q, scale, check_finite), queries)

    def prefill(self, layer, queries, *, scale=None, check_finite=True):
        """Causal attention of the newest tokens' queries over one layer.

        queries: [tokens, query heads, head_dim]: the queries of the layer's last `tokens`
        tokens, each attending to the entries up to its own position. scale and check_finite
        as in decode. Returns [tokens, query heads, head_dim] float32.
        """
        q = _float32(queries)
        if q.ndim != 3:
            raise Error("prefill: queries must be [tokens, query heads, head_dim], have shape "
                        f"{q.shape}")
        return _like(self._cache.attend(layer, q, scale, check_finite), queries)

    @property
    def dtype(self):
        """The K/V storage dtype's name: "float32", "float64", "float16" or "bfloat16"."""
        return self._cache.dtype

    @property
    def shape(self):
        """(num_layers, num_kv_heads, head_dim)."""
        return self._cache.shape


class _CacheMethods(_Attends):
    """What every cache offers besides attention: append a token's K/V, and how much it holds."""

    def append(self, layer, keys, values):
        """Appends K/V [tokens, kv heads, head_dim] (the cache's dtype) to one layer."""
        k, k_dtype = _storage(keys, "keys")
        v, v_dtype = _storage(values, "values")
        self._cache.append(layer, k, k_dtype, v, v_dtype)

    def entries(self, layer, kv_head):
        """The K/V rows one kv head of one layer holds (a compensation token counts as one)."""
        return self._cache.entries(layer, kv_head)

    def kv_bytes(self):
        """Bytes of K and V the cache holds: entries x 2 x head_dim x the dtype's size, summed
        over every layer and kv head (sinks, windows and compensation tokens counted)."""
        return self._cache.kv_bytes()

    def allocated_bytes(self):
        """Bytes of K/V memory the cache has allocated, its reserved room included (>=
        kv_bytes())."""
        return self._cache.allocated_bytes()

    def max_new_tokens(self, layer):
        """How many of the layer's newest tokens every head still holds as entries of their own:
        a run of tokens appended together, or a prefill chunk, must fit in it to be attended
        causally (prefill). A compressed head holds its window and what it appended since (in
        bounded decode, the window alone); a head that dropped nothing holds every token."""
        return self._cache.max_new_tokens(layer)


class RazorCache(_CacheMethods):
    """The RazorAttention cache: retrieval kv heads (the plan's) keep every token; every other
    head keeps the sinks, one compensation token and a recent window. resource: a
    HugePageResource its K/V memory comes from (kept alive by the cache), or None for the heap."""

    def __init__(self, plan, dtype="float32", config=None, *, resource=None, _cache=None):
        if _cache is None:
            if isinstance(dtype, RazorConfig):
                raise Error("RazorCache: dtype is a RazorConfig; pass it as config=")
            dtype = _dtype_name(dtype, "RazorCache")
            if config is not None and not isinstance(config, RazorConfig):
                raise Error(f"RazorCache: config must be a RazorConfig or None, got a "
                            f"{type(config).__name__}")
        self._cache = _cache or _razorkv._RazorCache(plan, dtype, config or RazorConfig(),
                                                     resource)

    def compress_layer(self, layer, keys, values=None):
        """Compresses one layer's prefill, read in place: K/V [tokens, kv heads, head_dim], or
        a PagedKV (keys; values then None) holding the prompt in an engine's page pools."""
        if isinstance(keys, PagedKV):
            if values is not None:
                raise Error("compress_layer: a PagedKV holds the values too; give no values")
            self._cache.compress_layer_paged(layer, keys._cache)
            return
        if values is None:
            raise Error("compress_layer: values are missing (keys are an array, not a PagedKV)")
        k, k_dtype = _storage(keys, "keys")
        v, v_dtype = _storage(values, "values")
        self._cache.compress_layer(layer, k, k_dtype, v, v_dtype)

    def compress_chunk(self, layer, keys, values):
        """Adds one chunk of a prompt prefilled in chunks (the first chunk compresses)."""
        k, k_dtype = _storage(keys, "keys")
        v, v_dtype = _storage(values, "values")
        self._cache.compress_chunk(layer, k, k_dtype, v, v_dtype)

    def num_tokens(self, layer):
        """Tokens the layer has seen: the prompt plus every token appended since."""
        return self._cache.num_tokens(layer)

    def window(self, layer, kv_head):
        """The recent window, in tokens, a compressed kv head keeps, as fixed at compression
        (max(s0, N / c), or config.fixed_window); 0 for a retrieval head, which keeps all."""
        return self._cache.window(layer, kv_head)

    def is_retrieval(self, layer, kv_head):
        """True when the plan keeps this kv head whole."""
        return self._cache.is_retrieval(layer, kv_head)

    def dense_kv_bytes(self):
        """Bytes the same tokens would take in a dense cache of this dtype (every head whole)."""
        return self._cache.dense_kv_bytes()

    def compression_ratio(self):
        """kv_bytes() / dense_kv_bytes(): the share of a dense cache's bytes this cache holds."""
        return self._cache.compression_ratio()

    def dropped_tokens(self):
        """Tokens the heads have folded into their compensation tokens, over every layer and kv
        head. 0 after compression says the cache kept the prompt whole: no head had more than its
        sinks and window (at least config.s0 tokens, 4,000 by default)."""
        return self._cache.dropped_tokens()

    def kv_bytes_after(self, tokens):
        """kv_bytes() once `tokens` more tokens are appended to every compressed layer (a
        bounded head's window fills, then folds into its compensation token)."""
        return self._cache.kv_bytes_after(tokens)

    def clear(self):
        """Empties every layer (each reads as uncompressed again) but keeps the buffers, so the
        next prompt no longer than this one allocates nothing: one cache per engine slot."""
        self._cache.clear()

    def release(self):
        """Empties every layer and frees its memory (allocated_bytes() drops to 0); the cache
        stays usable."""
        self._cache.release()

    def save_state(self):
        """The cache as bytes (razorkv's state format), for RazorCache.restore_state."""
        return self._cache.save_state()

    @staticmethod
    def restore_state(state, dtype="float32", *, resource=None, max_bytes=None):
        """The cache save_state wrote, its K/V memory from `resource` (None: the heap).

        The state is checked throughout (a state save_state could not have written is a
        razorkv.Error naming the field). `max_bytes` bounds the K/V bytes the restored cache
        may allocate, reserved room included; None allows 64 MiB more than 8 times the state's
        size, so that a small state cannot demand gigabytes."""
        return RazorCache(
            None,
            _cache=_razorkv._RazorCache.restore_state(
                bytes(state), _dtype_name(dtype, "RazorCache.restore_state"), resource, max_bytes))


class PagedKV(_Attends):
    """One sequence's K/V in an engine's page pools, read in place: nothing is copied, and each
    call reads the pools as they are then. key_pools and value_pools hold one array per layer,
    [num_pages, page_size, kv heads, head_dim] (layout "nhd", vLLM's and FlashInfer's) or
    [num_pages, kv heads, page_size, head_dim] ("hnd"), any strides with a contiguous last axis
    (so a slice of one K/V tensor serves), all one dtype. page_table lists the sequence's pages,
    oldest first, every one full but the last: ceil(num_tokens / page_size) integers. decode
    and prefill attend over it; RazorCache.compress_layer(layer, paged) compresses a prompt from
    it. It keeps the arrays alive; make a new one when the sequence grows."""

    def __init__(self, key_pools, value_pools, page_table, num_tokens, *, layout="nhd"):
        k = [_storage(x, "key_pools") for x in key_pools]
        v = [_storage(x, "value_pools") for x in value_pools]
        declared = {d for _, d in k + v}
        if len(declared) > 1:
            raise Error("PagedKV: every pool must hold one dtype (some are bfloat16, some not)")
        table, _ = _storage(page_table, "page_table")
        self._cache = _razorkv._PagedKV([a for a, _ in k], [a for a, _ in v],
                                        declared.pop() if declared else "", table, num_tokens,
                                        layout)

    @property
    def num_tokens(self):
        """The sequence's tokens, as given."""
        return self._cache.num_tokens

    @property
    def page_size(self):
        """Tokens per page, from the pools' shape."""
        return self._cache.page_size


class Cache(_CacheMethods):
    """A policy's cache (compress): full, StreamingLLM, SnapKV, H2O or razor."""

    def __init__(self, cache):
        self._cache = cache


def compress(policy, keys, values, *, budget_entries, queries=None, num_query_heads=None,
             resource=None):
    """The cache `policy` makes of a prompt: per-layer keys and values [N, kv heads, head_dim]
    and, for policies that read them (SnapKV, H2O), the last Nq queries [Nq, query heads,
    head_dim] of every layer; all one dtype. budget_entries: entries per kv head on average.
    resource: a HugePageResource the cache's K/V memory comes from, or None for the heap."""
    if len(keys) == 0:
        raise Error("compress: keys holds no layer")
    k = [_storage(x, "keys") for x in keys]
    v = [_storage(x, "values") for x in values]
    q = [_storage(x, "queries") for x in (queries or [])]
    dtypes = {d for _, d in k + v + q}
    kinds = {a.dtype.str for a, _ in k + v + q}
    if len(dtypes) != 1 or len(kinds) != 1:
        raise Error("compress: keys, values and queries must share one dtype")
    layers, (_, kv_heads, head_dim) = len(k), k[0][0].shape
    if num_query_heads is None:
        num_query_heads = q[0][0].shape[1] if q else kv_heads
    shape = (layers, num_query_heads, kv_heads, head_dim)
    return Cache(policy._compress(shape, [a for a, _ in k], [a for a, _ in v], [a for a, _ in q],
                                  dtypes.pop(), budget_entries, resource))
