"""
razorkv: RazorAttention KV-cache compression (C++ core; see the razorkv package)
"""
from __future__ import annotations
import collections.abc
import numpy
import numpy.typing
import typing
__all__: list[str] = ['Error', 'GgufFile', 'HeadPlan', 'HeadScores', 'HugePageResource', 'Policy', 'Probe', 'RazorConfig', 'alibi_logit_bound', 'alibi_slopes', 'alibi_span', 'compressed_kv_bytes', 'full_kv_bytes', 'model_presets', 'select', 'select_alibi', 'select_for_budget']
class Error(ValueError):
    pass
class Probe:
    """
    The calibration probe: `period` random token ids repeated `repeats` times.
    
    Run the model on probe.tokens; echo heads attend to the earlier copy of the current token,
    induction heads to the token after it. Probe(period=2500, repeats=4, *, vocab_max,
    vocab_min=0, bos=None, seed=0, allow_duplicates=False): ids drawn from [vocab_min,
    vocab_max), without repeats within a period unless allow_duplicates; bos, when given, is
    prepended. A bad field is a razorkv.Error naming it.
    """
    @staticmethod
    def from_tokens(tokens: collections.abc.Sequence[typing.SupportsInt | typing.SupportsIndex], period: typing.SupportsInt | typing.SupportsIndex, repeats: typing.SupportsInt | typing.SupportsIndex, has_bos: bool = False) -> Probe:
        """
        A probe the engine already has (e.g. read back from probe.npy): tokens must be [bos,] then `repeats` identical copies of `period` ids; a mismatch names the first position that differs.
        """
    def __init__(self, period: typing.SupportsInt | typing.SupportsIndex = 2500, repeats: typing.SupportsInt | typing.SupportsIndex = 4, *, vocab_max: typing.SupportsInt | typing.SupportsIndex, vocab_min: typing.SupportsInt | typing.SupportsIndex = 0, bos: typing.SupportsInt | typing.SupportsIndex | None = None, seed: typing.SupportsInt | typing.SupportsIndex = 0, allow_duplicates: bool = False) -> None:
        """
        Draws the probe's ids (see the class); period and repeats at least 1.
        """
    def __len__(self) -> int:
        """
        Tokens in all: P * R, plus one with a BOS.
        """
    @property
    def has_bos(self) -> bool:
        """
        Whether tokens[0] is a BOS id before the copies.
        """
    @property
    def period(self) -> int:
        """
        Random ids per copy (P).
        """
    @property
    def repeats(self) -> int:
        """
        Copies of the period (R).
        """
    @property
    def tokens(self) -> numpy.typing.NDArray[numpy.int64]:
        """
        The ids to run the model on, int64 [len(probe)] (a copy).
        """
class HeadScores:
    """
    Echo and induction scores of every query head, layer by layer.
    
    HeadScores(num_layers, num_query_heads, num_kv_heads) is empty; set_layer fills one layer.
    razorkv.torch.score_heads and load_scores return filled ones; select reads them.
    """
    @staticmethod
    def from_json(text: str) -> HeadScores:
        """
        Scores from scores.json text (a malformed one names the field).
        """
    def __init__(self, num_layers: typing.SupportsInt | typing.SupportsIndex, num_query_heads: typing.SupportsInt | typing.SupportsIndex, num_kv_heads: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Empty scores for the shape (complete is False).
        """
    def set_layer(self, layer: typing.SupportsInt | typing.SupportsIndex, echo: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], induction: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex]) -> None:
        """
        Sets one layer's scores: echo and induction are num_query_heads floats each, finite (score_queries_keys returns them).
        """
    def to_json(self, head_dim: typing.SupportsInt | typing.SupportsIndex = 0) -> str:
        """
        The scores as scores.json text; a head_dim > 0 is recorded for `razorkv select`.
        """
    @property
    def complete(self) -> bool:
        """
        True once every layer is set.
        """
    @property
    def echo(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        Echo scores, float64 [num_layers, num_query_heads] (0 where a layer is unset).
        """
    @property
    def induction(self) -> numpy.typing.NDArray[numpy.float64]:
        """
        Induction scores, float64 [num_layers, num_query_heads] (0 where unset).
        """
    @property
    def num_kv_heads(self) -> int:
        """
        KV heads per layer (a GQA group of query heads shares one).
        """
    @property
    def num_layers(self) -> int:
        """
        Layers.
        """
    @property
    def num_query_heads(self) -> int:
        """
        Query heads per layer.
        """
class HeadPlan:
    """
    Which kv heads keep their whole cache (retrieval heads) in every layer.
    
    HeadPlan(shape) with shape = (num_layers, num_query_heads, num_kv_heads, head_dim) keeps none;
    select, load_plan and razorkv.torch.calibrate make calibrated ones. Under GQA the kv head (the
    group of query heads that reads it) is the unit.
    """
    @staticmethod
    def parse(text: str, *, format: str = 'auto', shape: tuple | None = None, threshold: typing.SupportsFloat | typing.SupportsIndex = 0.5, sparsity: typing.SupportsFloat | typing.SupportsIndex | None = None) -> HeadPlan:
        """
        A plan from text in any format format() writes ("auto" recognises it); see load_plan for shape, threshold and sparsity.
        """
    def __init__(self, shape: tuple) -> None:
        """
        A plan for the model's shape with no retrieval head.
        """
    def buffer_override(self, layer: typing.SupportsInt | typing.SupportsIndex, kv_head: typing.SupportsInt | typing.SupportsIndex) -> int | None:
        """
        The window, in tokens, that replaces max(s0, N / c) for this compressed head (the ALiBi plans set one), or None.
        """
    def format(self, format: str = 'razorkv') -> str:
        """
        The plan as text: "razorkv" (JSON), "mindspore" (mindspore_gs JSON) or "duoattention" (TSV of gates 1/0); save_plan writes it.
        """
    def is_retrieval(self, layer: typing.SupportsInt | typing.SupportsIndex, kv_head: typing.SupportsInt | typing.SupportsIndex) -> bool:
        """
        True when the kv head keeps its whole cache.
        """
    def retrieval_heads(self, layer: typing.SupportsInt | typing.SupportsIndex) -> list[int]:
        """
        The layer's retrieval kv heads, increasing.
        """
    def set_buffer_override(self, layer: typing.SupportsInt | typing.SupportsIndex, kv_head: typing.SupportsInt | typing.SupportsIndex, tokens: typing.SupportsInt | typing.SupportsIndex) -> None:
        """
        Sets the head's window to `tokens` (>= 1) whatever the prompt's length.
        """
    def set_retrieval(self, layer: typing.SupportsInt | typing.SupportsIndex, kv_head: typing.SupportsInt | typing.SupportsIndex, retrieval: bool = True) -> None:
        """
        Makes the kv head a retrieval head (or, with retrieval=False, a compressed one).
        """
    def validate_against(self, shape: tuple) -> None:
        """
        Raises razorkv.Error naming the first field of the plan's shape that differs from `shape` (the model's (num_layers, num_query_heads, num_kv_heads, head_dim)): a plan calibrated for another model.
        """
    @property
    def method(self) -> str:
        """
        How the plan was made, as its file records it (e.g. "razorattention", "alibi span", "manual").
        """
    @property
    def num_retrieval(self) -> int:
        """
        Retrieval kv heads over every layer.
        """
    @property
    def retrieval_mask(self) -> numpy.typing.NDArray[numpy.bool]:
        """
        bool [num_layers, num_kv_heads]: True at the retrieval heads.
        """
    @property
    def shape(self) -> tuple:
        """
        (num_layers, num_query_heads, num_kv_heads, head_dim).
        """
class GgufFile:
    """
    A GGUF model file, read and checked at construction.
    
    GgufFile(path). file["general.architecture"] gives a metadata value as a Python value (arrays
    as lists), `key in file` tests for one, keys() lists them; tensor(name) dequantises a tensor
    to float32. A malformed file is a razorkv.Error naming the offset and the field.
    """
    def __contains__(self, key: str) -> bool:
        ...
    def __getitem__(self, key: str) -> typing.Any:
        ...
    def __init__(self, path: str) -> None:
        """
        Reads and checks the file at `path` (its tensors stay on disk).
        """
    def keys(self) -> list[str]:
        """
        The metadata keys, in file order.
        """
    def plan(self) -> HeadPlan | None:
        """
        The HeadPlan the file carries under "razorkv.plan", or None.
        """
    def tensor(self, name: str) -> numpy.typing.NDArray[numpy.float32]:
        """
        The tensor dequantised to a float32 array, its GGUF dimensions reversed (GGUF lists the contiguous one first; numpy's C order lists it last).
        """
    def tensor_type(self, name: str) -> str:
        """
        The tensor's GGML type, e.g. "F32", "Q4_1".
        """
    @property
    def alignment(self) -> int:
        """
        The tensor data's alignment in bytes.
        """
    @property
    def tensor_names(self) -> list[str]:
        """
        The tensors' names, in file order.
        """
    @property
    def version(self) -> int:
        """
        The GGUF format version (2 or 3).
        """
class RazorConfig:
    """
    What a compressed (non-retrieval) head keeps, and how it decodes.
    
    RazorConfig(*, sinks=4, s0=4000, c=5.0, fixed_window=0, compensation="weighted",
    decode="append", check_finite=True): the first `sinks` tokens, a recent window of max(s0,
    N / c) tokens of an N-token prompt (fixed_window > 0: that many instead), and one
    compensation token standing for what was dropped ("weighted": mean key and value weighted by
    their count, "unweighted": the mean as one token, "none"). decode "append" lets the window grow
    as tokens are decoded; "bounded" keeps it at its size and folds the oldest token into the
    compensation token. check_finite: compression and append raise razorkv.Error at the first NaN
    or infinity they are handed (one more pass over the K/V); unchecked (False, the C++ default),
    a dropped non-finite token poisons its head's compensation token silently.
    storage: how windows and retrieval heads store their rows, None (the cache's dtype), "q8" or
    "q4" (blocks of 32 values and a 16-bit scale, 0.53 and 0.28 of a 16-bit row; head_dim a
    multiple of 32); retrieval_storage: the same for retrieval heads alone (None: as storage);
    rotate_keys: keys are stored rotated by the Walsh-Hadamard transform, which decode matches by
    rotating each query (head_dim a power of two). Sinks and compensation tokens stay the dtype.
    """
    def __init__(self, *, sinks: typing.SupportsInt | typing.SupportsIndex = 4, s0: typing.SupportsInt | typing.SupportsIndex = 4000, c: typing.SupportsFloat | typing.SupportsIndex = 5.0, fixed_window: typing.SupportsInt | typing.SupportsIndex = 0, compensation: str = 'weighted', decode: str = 'append', check_finite: bool = True, storage: str | None = None, rotate_keys: bool = False, retrieval_storage: str | None = None) -> None:
        """
        See the class; a bad field is a razorkv.Error naming it and its value.
        """
    @property
    def c(self) -> float:
        """
        The window is N / c tokens of an N-token prompt when that exceeds s0.
        """
    @property
    def check_finite(self) -> bool:
        """
        Whether compression and append reject NaN and infinity.
        """
    @property
    def compensation(self) -> str:
        """
        "weighted", "unweighted" or "none".
        """
    @property
    def decode(self) -> str:
        """
        "append" or "bounded".
        """
    @property
    def fixed_window(self) -> int:
        """
        A window of this many tokens whatever N (0: max(s0, N / c)).
        """
    @property
    def retrieval_storage(self) -> str | None:
        """
        "q8", "q4" or None: how retrieval heads store their rows.
        """
    @property
    def rotate_keys(self) -> bool:
        """
        Whether keys are stored rotated (decode rotates the queries to match).
        """
    @property
    def s0(self) -> int:
        """
        The smallest window, in tokens.
        """
    @property
    def sinks(self) -> int:
        """
        Attention-sink tokens kept.
        """
    @property
    def storage(self) -> str | None:
        """
        "q8", "q4" or None: how windows (and retrieval heads, unless retrieval_storage) store their rows.
        """
class HugePageResource:
    """
    K/V memory on 2 MiB huge pages, and an engine's pool of it.
    
    HugePageResource(*, min_bytes=2 MiB, keep_bytes=0): blocks of at least min_bytes are mapped
    on huge-page boundaries (Linux backs them with huge pages where transparent huge pages are
    enabled), smaller ones come from the heap. A freed block stays mapped for the next cache while
    the kept blocks total at most keep_bytes, so an engine that makes a cache per request pays the
    OS for its pages once. Pass it as resource= to RazorCache, RazorCache.restore_state or
    compress; a cache keeps its resource alive. HugePageResource.maps_blocks is True where this
    build maps blocks itself (Linux); elsewhere every block is the heap's.
    """
    maps_blocks: typing.ClassVar[bool] = True
    def __init__(self, *, min_bytes: typing.SupportsInt | typing.SupportsIndex = 2097152, keep_bytes: typing.SupportsInt | typing.SupportsIndex = 0) -> None:
        """
        See the class; min_bytes > 0, keep_bytes >= 0.
        """
    def kept_bytes(self) -> int:
        """
        Bytes of freed blocks kept mapped for reuse now.
        """
    @property
    def keep_bytes(self) -> int:
        """
        Freed mapped blocks kept for reuse, at most, in bytes.
        """
    @property
    def min_bytes(self) -> int:
        """
        Blocks at least this large are mapped on huge-page boundaries.
        """
class _PagedKV:
    def __init__(self, key_pools: collections.abc.Sequence[numpy.ndarray], value_pools: collections.abc.Sequence[numpy.ndarray], dtype: str, page_table: numpy.ndarray, num_tokens: typing.SupportsInt | typing.SupportsIndex, layout: str) -> None:
        ...
    def attend(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], arg2: typing.SupportsFloat | typing.SupportsIndex | None, arg3: bool) -> numpy.typing.NDArray[numpy.float32]:
        ...
    @property
    def dtype(self) -> str:
        ...
    @property
    def num_tokens(self) -> int:
        ...
    @property
    def page_size(self) -> int:
        ...
    @property
    def shape(self) -> tuple:
        ...
class _RazorCache:
    @staticmethod
    def restore_state(state: bytes, dtype: str, resource: HugePageResource = None, max_bytes: typing.SupportsInt | typing.SupportsIndex | None = None) -> _RazorCache:
        ...
    def __init__(self, plan: HeadPlan, dtype: str, config: RazorConfig, resource: HugePageResource = None) -> None:
        ...
    def allocated_bytes(self) -> int:
        ...
    def append(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: numpy.ndarray, arg2: str, arg3: numpy.ndarray, arg4: str) -> None:
        ...
    def attend(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], arg2: typing.SupportsFloat | typing.SupportsIndex | None, arg3: bool) -> numpy.typing.NDArray[numpy.float32]:
        ...
    def clear(self) -> None:
        ...
    def compress_chunk(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: numpy.ndarray, arg2: str, arg3: numpy.ndarray, arg4: str) -> None:
        ...
    def compress_layer(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: numpy.ndarray, arg2: str, arg3: numpy.ndarray, arg4: str) -> None:
        ...
    def compress_layer_paged(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: _PagedKV) -> None:
        ...
    def compression_ratio(self) -> float:
        ...
    def dense_kv_bytes(self) -> int:
        ...
    def dropped_tokens(self) -> int:
        ...
    def entries(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def is_retrieval(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex) -> bool:
        ...
    def kv_bytes(self) -> int:
        ...
    def kv_bytes_after(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def max_new_tokens(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def num_tokens(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def release(self) -> None:
        ...
    def save_state(self) -> bytes:
        ...
    def window(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    @property
    def dtype(self) -> str:
        ...
    @property
    def shape(self) -> tuple:
        ...
class _Cache:
    def allocated_bytes(self) -> int:
        ...
    def append(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: numpy.ndarray, arg2: str, arg3: numpy.ndarray, arg4: str) -> None:
        ...
    def attend(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.Annotated[numpy.typing.ArrayLike, numpy.float32], arg2: typing.SupportsFloat | typing.SupportsIndex | None, arg3: bool) -> numpy.typing.NDArray[numpy.float32]:
        ...
    def entries(self, arg0: typing.SupportsInt | typing.SupportsIndex, arg1: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    def kv_bytes(self) -> int:
        ...
    def max_new_tokens(self, arg0: typing.SupportsInt | typing.SupportsIndex) -> int:
        ...
    @property
    def dtype(self) -> str:
        ...
    @property
    def shape(self) -> tuple:
        ...
class Policy:
    """
    A KV-compression policy, for razorkv.compress.
    
    Policy.full(), Policy.streaming_llm(), Policy.snapkv(), Policy.h2o() and Policy.razor(plan)
    make one; compress(policy, keys, values, budget_entries=...) applies it to a prompt, every
    policy keeping at most budget_entries entries per kv head on average, so that they compare at
    equal bytes.
    """
    @staticmethod
    def full() -> Policy:
        """
        Keeps every token (the reference the others are measured against).
        """
    @staticmethod
    def h2o(recent: typing.SupportsInt | typing.SupportsIndex = 0, observed_queries: typing.SupportsInt | typing.SupportsIndex = 0) -> Policy:
        """
        H2O: each head keeps its `recent` newest tokens (0: half the budget) and the heavy hitters, the tokens with the most accumulated attention, from the prompt's last `observed_queries` queries (0: all given) and then from every decode step.
        """
    @staticmethod
    def razor(plan: HeadPlan, config: RazorConfig = ..., name: str = 'razor') -> Policy:
        """
        RazorAttention at the budget: the plan's retrieval heads keep every token, the others the config's sinks and compensation token and the window that fills budget_entries per kv head on average; `name` labels it in reports.
        """
    @staticmethod
    def snapkv(window: typing.SupportsInt | typing.SupportsIndex = 32, kernel: typing.SupportsInt | typing.SupportsIndex = 5, pooling: str = 'max') -> Policy:
        """
        SnapKV: the prompt's last `window` queries vote (their attention, pooled over `kernel` tokens, "max" or "average") for the tokens each head keeps beside the window; compress needs those queries.
        """
    @staticmethod
    def streaming_llm(sinks: typing.SupportsInt | typing.SupportsIndex = 4) -> Policy:
        """
        StreamingLLM: the first `sinks` tokens and the most recent ones, in every head.
        """
    def _compress(self, shape: tuple, keys: collections.abc.Sequence[numpy.ndarray], values: collections.abc.Sequence[numpy.ndarray], queries: collections.abc.Sequence[numpy.ndarray], dtype: str, budget_entries: typing.SupportsInt | typing.SupportsIndex, resource: HugePageResource = None) -> _Cache:
        ...
    @property
    def name(self) -> str:
        """
        The policy's name, as reports print it.
        """
    @property
    def reads_queries(self) -> bool:
        """
        True for the policies that read the prompt's last queries (SnapKV, H2O): compress needs them.
        """
def _score_probabilities(arg0: Probe, arg1: numpy.ndarray, arg2: str, arg3: typing.SupportsFloat | typing.SupportsIndex, arg4: typing.SupportsInt | typing.SupportsIndex) -> tuple:
    ...
def _score_queries_keys(arg0: Probe, arg1: numpy.ndarray, arg2: str, arg3: numpy.ndarray, arg4: str, arg5: typing.SupportsFloat | typing.SupportsIndex | None, arg6: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], arg7: typing.SupportsInt | typing.SupportsIndex) -> tuple:
    ...
def alibi_logit_bound(spectral_norm: typing.SupportsFloat | typing.SupportsIndex, hidden_norm_bound: typing.SupportsFloat | typing.SupportsIndex, scale: typing.SupportsFloat | typing.SupportsIndex) -> float:
    """
    The bound B on |scale * q.k|: scale * spectral_norm * hidden_norm_bound^2, with spectral_norm = ||W_Q W_K^T||_2 and hidden_norm_bound bounding the hidden states' norm.
    """
def alibi_slopes(num_heads: typing.SupportsInt | typing.SupportsIndex) -> list[float]:
    """
    The ALiBi slopes of Press et al. for num_heads heads: 2^(-8 i / n), i = 1..n, for a power of two n, otherwise the reference implementation's interleaving.
    """
def alibi_span(slope: typing.SupportsFloat | typing.SupportsIndex, bound: typing.SupportsFloat | typing.SupportsIndex, eps: typing.SupportsFloat | typing.SupportsIndex = 0.001) -> float:
    """
    The distance beyond which a head with `slope` gives less than eps of its attention when every logit is within [-bound, bound]: (2 bound - ln eps) / slope.
    """
def compressed_kv_bytes(plan: HeadPlan, tokens: typing.SupportsInt | typing.SupportsIndex, *, sinks: typing.SupportsInt | typing.SupportsIndex = 4, s0: typing.SupportsInt | typing.SupportsIndex = 4000, c: typing.SupportsFloat | typing.SupportsIndex = 5.0, dtype_bytes: typing.SupportsInt | typing.SupportsIndex = 2, storage: str | None = None, retrieval_storage: str | None = None) -> int:
    """
    Bytes of the plan's razor cache at `tokens` tokens: retrieval heads whole, every other head its sinks, one compensation token and a window of max(s0, tokens / c) (or its buffer_override); a head with no more tokens than sinks and window keeps them all. With storage ("q8" or "q4", as RazorConfig's) windows and retrieval heads count their blocks' bytes (retrieval heads retrieval_storage's when given); sinks and compensation tokens stay dtype_bytes.
    """
def full_kv_bytes(shape: tuple, tokens: typing.SupportsInt | typing.SupportsIndex, dtype_bytes: typing.SupportsInt | typing.SupportsIndex = 2, *, storage: str | None = None) -> int:
    """
    Bytes of a dense K/V cache of the model (num_layers, num_query_heads, num_kv_heads, head_dim) at `tokens` tokens: 2 * layers * kv heads * head_dim * tokens * dtype_bytes, or with storage "q8" / "q4" the rows' 8-/4-bit blocks (34 / 18 bytes per 32 values).
    """
def model_presets() -> dict:
    """
    Well-known models' shapes: {name: (num_layers, num_query_heads, num_kv_heads, head_dim)}, for the calculator.
    """
def select(scores: HeadScores, *, head_dim: typing.SupportsInt | typing.SupportsIndex, induction_ratio: typing.SupportsFloat | typing.SupportsIndex = 0.14, echo_ratio: typing.SupportsFloat | typing.SupportsIndex = 0.01, gqa: str = 'sum', min_per_layer: typing.SupportsInt | typing.SupportsIndex = 0) -> HeadPlan:
    """
    The plan of RazorAttention's selection from complete HeadScores.
    
    Keeps the top induction_ratio of all kv groups by induction score, then the top echo_ratio
    by echo score (the paper's 14% + 1%). gqa: how a group's query-head scores combine, "sum",
    "mean" or "max". min_per_layer: at least this many retrieval groups in every layer.
    head_dim: the model's, recorded in the plan's shape. Returns a HeadPlan.
    """
def select_alibi(shape: tuple, slopes: collections.abc.Sequence[typing.SupportsFloat | typing.SupportsIndex], *, bound: typing.SupportsFloat | typing.SupportsIndex = 0.0, eps: typing.SupportsFloat | typing.SupportsIndex = 0.001, seq_len: typing.SupportsInt | typing.SupportsIndex | None = None, ratio: typing.SupportsFloat | typing.SupportsIndex | None = None) -> HeadPlan:
    """
    A plan for an ALiBi model from its slopes alone (no probe).
    
    slopes: one per query head (alibi_slopes), the same in every layer; a group's span is its
    query heads' largest alibi_span(slope, bound, eps). Give seq_len (groups whose span reaches
    it keep their whole cache) or ratio (the top share of groups by span); every other group
    gets ceil(span) as its buffer_override.
    """
def select_for_budget(scores: HeadScores, *, head_dim: typing.SupportsInt | typing.SupportsIndex, budget_bytes: typing.SupportsInt | typing.SupportsIndex, seq_len: typing.SupportsInt | typing.SupportsIndex, dtype_bytes: typing.SupportsInt | typing.SupportsIndex = 2, sinks: typing.SupportsInt | typing.SupportsIndex = 4, s0: typing.SupportsInt | typing.SupportsIndex = 4000, c: typing.SupportsFloat | typing.SupportsIndex = 5.0, induction_ratio: typing.SupportsFloat | typing.SupportsIndex = 0.14, echo_ratio: typing.SupportsFloat | typing.SupportsIndex = 0.01, gqa: str = 'sum') -> HeadPlan:
    """
    The largest selection whose cache fits budget_bytes at seq_len tokens.
    
    Scales induction_ratio and echo_ratio (keeping their proportion) to the largest overall
    ratio whose plan's compressed_kv_bytes (sinks, s0, c, dtype_bytes as there) fits, and returns
    that HeadPlan; a budget that not even zero retrieval groups fit is a razorkv.Error naming the
    budget and the smallest size.
    """
__version__: str = '0.1.0'
