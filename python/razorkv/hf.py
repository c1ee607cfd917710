"""razorkv.hf: calibration of a Hugging Face transformers model in one call.

    import razorkv.hf
    scores, plan = razorkv.hf.calibrate(model)      # a LlamaForCausalLM, Mistral, Qwen2
    razorkv.save_plan(plan, "plan.json")

For the Llama family and its close relatives (model types "llama", "mistral", "qwen2": SmolLM2
is a Llama), whose attention modules compute q_proj, k_proj and the model's rotary embedding
in the same way: the model prefills razorkv's probe once, each attention call's post-RoPE
queries and keys are recomputed from its hidden states and position embeddings with the
module's own projections and its modelling file's apply_rotary_pos_emb, and razorkv's
streaming scorer scores them (razorkv.torch.score_heads). Written against transformers 5.2,
whose attention modules take hidden_states and position_embeddings by keyword.

RazorCache is a transformers Cache: the prompt is prefilled densely (transformers' sdpa
attention), each layer's K/V is compressed into a razorkv cache as soon as the layer has
computed it, and every later step appends to that cache and attends over it with razorkv's
kernels, through the attention function razorkv.hf registers with transformers as "razorkv".
"""

import math
import sys

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import sdpa_mask

import razorkv
import razorkv.torch

FAMILIES = ("llama", "mistral", "qwen2")


def _family_check(model, where):
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        raise razorkv.Error(f"{where}: {type(model).__name__} (model_type {model_type!r}) is not "
                            f"a model family razorkv.hf knows ({', '.join(FAMILIES)})")
    inner = getattr(model, "model", model)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise razorkv.Error(f"{where}: {type(model).__name__} has no .model.layers; razorkv.hf "
                            "reads a *ForCausalLM or the *Model inside it")
    return config, [layer.self_attn for layer in layers]


def model_shape(model):
    """(num_layers, num_query_heads, num_kv_heads, head_dim) of a transformers model of a
    family razorkv.hf knows, from its config."""
    config, _ = _family_check(model, "razorkv.hf.model_shape")
    return _config_shape(config)


def _post_rope_qk(attn, inputs, output, kwargs):
    """The post-RoPE queries and keys of one attention call, [1, heads, L, head_dim]."""
    hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else inputs[0]
    if "position_embeddings" in kwargs:
        cos, sin = kwargs["position_embeddings"]
    elif len(inputs) > 1:
        cos, sin = inputs[1]
    else:
        raise razorkv.Error(f"razorkv.hf: {type(attn).__name__} was called without "
                            "position_embeddings; this transformers version computes RoPE "
                            "elsewhere than razorkv.hf expects (it is written for 5.2)")
    shape = (*hidden.shape[:-1], -1, attn.head_dim)
    q = attn.q_proj(hidden).view(shape).transpose(1, 2)
    k = attn.k_proj(hidden).view(shape).transpose(1, 2)
    rope = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    return rope(q, k, cos, sin)


def default_probe(model, *, vocab_min=0, seed=0):
    """The probe calibrate runs by default: min(2500, max_position_embeddings / 4) random ids of
    [vocab_min, vocab_size) repeated 4 times (the paper's 2,500 x 4 where the context allows).
    vocab_min: the first id that is not a control token (tokenizer.all_special_ids tells)."""
    config, _ = _family_check(model, "razorkv.hf.default_probe")
    period = min(2500, config.max_position_embeddings // 4, config.vocab_size - vocab_min)
    return razorkv.Probe(period=period, repeats=4, vocab_max=config.vocab_size,
                         vocab_min=vocab_min, seed=seed)


def calibrate(model, probe=None, *, induction_ratio=0.14, echo_ratio=0.01, gqa="sum",
              min_per_layer=0, row_step=1):
    """Scores every head of `model` on `probe` and selects the retrieval heads: returns
    (HeadScores, HeadPlan), as razorkv.torch.calibrate does.

    model: a transformers causal LM of the Llama family (see the module), in evaluation mode
        on the CPU; another family is a razorkv.Error naming its class.
    probe: a razorkv.Probe (default: default_probe(model)).
    induction_ratio, echo_ratio, gqa, min_per_layer: as razorkv.select (the paper's 14% of
        the kv groups by induction score and 1% by echo score).
    row_step: score every row_step-th query row (1: all).
    """
    _, modules = _family_check(model, "razorkv.hf.calibrate")
    probe = probe if probe is not None else default_probe(model)
    shape = model_shape(model)
    scale = getattr(modules[0], "scaling", None)

    def forward(m, tokens):
        m(input_ids=tokens, use_cache=False)

    with torch.no_grad():
        scores = razorkv.torch.score_heads(model, probe, modules, _post_rope_qk, scale=scale,
                                           row_step=row_step, forward=forward)
    plan = razorkv.select(scores, head_dim=shape[3], induction_ratio=induction_ratio,
                          echo_ratio=echo_ratio, gqa=gqa, min_per_layer=min_per_layer)
    return scores, plan


# ---- generation over a razorkv cache ------------------------------------------------------

ATTENTION = "razorkv"
"""The attention implementation RazorCache switches a model to: razorkv's kernels over a
RazorCache, transformers' sdpa (with its masks) for everything else."""


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    # transformers hands this function the tensors that the cache's update() returned, not the
    # cache: RazorCache.update marks the keys it returns with itself.
    owner = getattr(key, "_razorkv_owner", None)
    if owner is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    return owner._attend(module, query, key, value, attention_mask, dropout, scaling, kwargs)


AttentionInterface.register(ATTENTION, _attention)
AttentionMaskInterface.register(ATTENTION, sdpa_mask)


class _Layer(CacheLayerMixin):
    """One layer of a RazorCache as transformers' Cache sees it: lengths for the masks; its K/V
    live in the razorkv cache."""

    is_sliding = False
    is_compileable = False

    def __init__(self, owner, layer):
        super().__init__()
        self._owner, self._layer = owner, layer

    def lazy_initialization(self, key_states, value_states):
        self.is_initialized = True

    def update(self, key_states, value_states, cache_kwargs=None):
        return self._owner.update(key_states, value_states, self._layer, cache_kwargs)

    def get_seq_length(self):
        return self._owner._tokens[self._layer]

    def get_mask_sizes(self, cache_position):
        return self.get_seq_length() + cache_position.shape[0], 0

    def get_max_cache_shape(self):
        return -1

    def _unsupported(self, what):
        raise razorkv.Error(f"razorkv.hf.RazorCache: {what} is not supported (one sequence, "
                            "greedy or sampled generation)")

    def reset(self):
        self._owner._reset()

    def reorder_cache(self, beam_idx):
        self._unsupported("beam search (reorder_cache)")

    def crop(self, max_length):
        self._unsupported("cropping (assisted generation)")

    def batch_repeat_interleave(self, repeats):
        self._unsupported("num_return_sequences > 1 (batch_repeat_interleave)")

    def batch_select_indices(self, indices):
        self._unsupported("batch_select_indices")


class RazorCache(Cache):
    """A transformers Cache whose K/V live in a razorkv cache, for one sequence:

        cache = razorkv.hf.RazorCache(plan, model)
        out = model.generate(input_ids, past_key_values=cache, max_new_tokens=32)
        print(cache.kv_bytes(), "of", cache.dense_kv_bytes(), "bytes")

    The prompt is prefilled densely (transformers' own sdpa attention, so its logits are the
    full cache's); each layer's K/V is then compressed, and every later token is appended to
    the compressed cache and attends through razorkv's decode (one token) or causal prefill
    (several) kernels. Memory is freed: what a compressed head drops is never stored.

    what: a razorkv.HeadPlan (RazorAttention: the plan's retrieval heads keep every token, the
        others the sinks, a compensation token and the window max(s0, N / c) of `config`), or
        a razorkv.Policy (Policy.full(), streaming_llm(), snapkv(), h2o() or razor(plan)) at
        `budget`. A plan's cache compresses each layer as soon as it is prefilled; a policy
        compresses the whole prompt once the last layer is prefilled (it holds the prompt's
        dense K/V, and the queries of policies that read them, until then).
    model: the transformers model (a family razorkv.hf knows) or its config. The model's
        attention implementation becomes "razorkv" (razorkv.hf.ATTENTION): razorkv's kernels
        over a RazorCache, transformers' sdpa everywhere else, so that other caches and
        calibration behave as under sdpa.
    config: a razorkv.RazorConfig for a plan (sinks, s0, c, compensation, check_finite).
    budget: for a policy, the share of the full cache's entries each kv head keeps on average
        (a float in (0, 1], e.g. 1/3), or entries per kv head (an int).
    observed_queries: for a policy that reads queries (Policy.reads_queries: SnapKV's votes,
        H2O's heavy hitters), how many of the prompt's last queries per layer it is given;
        None: every query of the prompt.
    resource: a razorkv.HugePageResource the K/V memory comes from (None: the heap).

    One sequence (batch size 1, no padding); beam search, num_return_sequences > 1 and
    assisted generation are errors. The K/V dtype is the model's (float32, float16 or bfloat16).
    """

    def __init__(self, what, model, *, config=None, budget=None, observed_queries=None,
                 resource=None):
        model_config = getattr(model, "config", model)
        if getattr(model_config, "model_type", None) not in FAMILIES:
            raise razorkv.Error(f"razorkv.hf.RazorCache: model must be a transformers model or "
                                f"config of a family razorkv.hf knows ({', '.join(FAMILIES)}), "
                                f"got a {type(model).__name__}")
        self._shape = _config_shape(model_config)
        if isinstance(what, razorkv.HeadPlan):
            if budget is not None or observed_queries is not None:
                raise razorkv.Error("razorkv.hf.RazorCache: budget and observed_queries are a "
                                    "policy's; a plan's windows come from config (s0, c)")
            if tuple(what.shape) != self._shape:
                raise razorkv.Error(f"razorkv.hf.RazorCache: the plan's shape {tuple(what.shape)} "
                                    f"is not the model's {self._shape} (layers, query heads, kv "
                                    "heads, head_dim)")
            if config is not None and not isinstance(config, razorkv.RazorConfig):
                raise razorkv.Error(f"razorkv.hf.RazorCache: config must be a razorkv.RazorConfig, "
                                    f"got a {type(config).__name__}")
        elif isinstance(what, razorkv.Policy):
            if config is not None:
                raise razorkv.Error("razorkv.hf.RazorCache: config is a plan's; a policy takes "
                                    "budget (Policy.razor(plan, config) carries a config)")
            _budget_entries(budget, 1)  # checks the budget's type and range now
            if observed_queries is not None and (not isinstance(observed_queries, int)
                                                 or observed_queries < 1):
                raise razorkv.Error(f"razorkv.hf.RazorCache: observed_queries must be a positive "
                                    f"int or None, got {observed_queries!r}")
        else:
            raise razorkv.Error(f"razorkv.hf.RazorCache: what must be a razorkv.HeadPlan or a "
                                f"razorkv.Policy, got a {type(what).__name__}")
        num_layers = self._shape[0]
        super().__init__(layers=[_Layer(self, layer) for layer in range(num_layers)])
        self._what, self._config, self._budget = what, config, budget
        self._observed, self._resource = observed_queries, resource
        self._reset()
        if model_config is not model and hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation(ATTENTION)
        else:
            model_config._attn_implementation = ATTENTION

    def _reset(self):
        num_layers = self._shape[0]
        self._cache = None  # the razorkv cache (a plan's at once, a policy's after the prompt)
        self._dtype = None  # the model's K/V dtype, from the first update
        self._tokens = [0] * num_layers
        self._prefilling = [False] * num_layers
        self._prompt = [None] * num_layers  # a policy's prompt: (keys, values, queries) per layer

    @property
    def razorkv_cache(self):
        """The razorkv cache behind this one (razorkv.RazorCache for a plan, razorkv.Cache for a
        policy), or None before the prompt is compressed."""
        return self._cache

    def kv_bytes(self):
        """Bytes of K/V the cache holds now (0 before its prompt is compressed)."""
        return self._cache.kv_bytes() if self._cache is not None else 0

    def dense_kv_bytes(self):
        """Bytes the same tokens take in a dense cache of the model's dtype (every head
        whole): what transformers' DynamicCache would hold."""
        _, _, kv_heads, head_dim = self._shape
        size = self._dtype.itemsize if self._dtype else 0
        return sum(self._tokens) * kv_heads * head_dim * 2 * size

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        """Called by each attention layer with its new K/V [1, kv heads, tokens, head_dim]: the
        prompt's are compressed (a plan) or kept until the prompt is whole (a policy), later
        ones appended. Returns them, marked for razorkv's attention function."""
        batch, kv_heads, tokens, head_dim = key_states.shape
        if batch != 1:
            raise razorkv.Error(f"razorkv.hf.RazorCache holds one sequence; the batch has {batch} "
                                "(beam search and num_return_sequences > 1 make batches too)")
        if (kv_heads, head_dim) != self._shape[2:]:
            raise razorkv.Error(f"razorkv.hf.RazorCache: layer {layer_idx} gave K/V of {kv_heads} "
                                f"kv heads x {head_dim}, the cache's shape is {self._shape}")
        keys, values = key_states[0].transpose(0, 1), value_states[0].transpose(0, 1)
        self.layers[layer_idx].is_initialized = True
        prefill = self._tokens[layer_idx] == 0
        if prefill and self._dtype is None:
            self._dtype = key_states.dtype
        if prefill and isinstance(self._what, razorkv.HeadPlan):
            if self._cache is None:
                self._cache = razorkv.RazorCache(self._what, key_states.dtype,
                                                 self._config or razorkv.RazorConfig(),
                                                 resource=self._resource)
            self._cache.compress_layer(layer_idx, keys, values)
        elif prefill:
            self._prompt[layer_idx] = [keys, values, None]
        elif self._cache is None:
            raise razorkv.Error(f"razorkv.hf.RazorCache: layer {layer_idx} got a second step "
                                "before every layer had its prompt (a forward was interrupted?)")
        else:
            room = self._cache.max_new_tokens(layer_idx)
            if tokens > room:  # checked before appending, so that the cache stays as it was
                raise razorkv.Error(f"razorkv.hf.RazorCache: {tokens} new tokens at once in layer "
                                    f"{layer_idx}, more than the {room} that every head holds "
                                    "as entries of their own; give them in smaller steps")
            self._cache.append(layer_idx, keys, values)
        self._prefilling[layer_idx] = prefill
        self._tokens[layer_idx] += tokens
        key_states._razorkv_owner = self
        return key_states, value_states

    def _attend(self, module, query, key, value, attention_mask, dropout, scaling, kwargs):
        layer = module.layer_idx
        if self._prefilling[layer]:
            out = sdpa_attention_forward(module, query, key, value, attention_mask,
                                         dropout=dropout, scaling=scaling, **kwargs)
            if self._prompt[layer] is not None:
                self._observe(layer, query)
            return out
        if attention_mask is not None:
            attended = attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0
            if not bool(attended[..., -1, :].all()):  # the last query sees every earlier token
                raise razorkv.Error("razorkv.hf.RazorCache: the attention mask hides tokens "
                                    "(padding); the cache holds one unpadded sequence")
        _, heads, tokens, head_dim = query.shape
        q = query[0].transpose(0, 1)  # [tokens, query heads, head_dim]
        if tokens == 1:
            out = self._cache.decode(layer, q[0], scale=scaling, check_finite=False)
        else:
            out = self._cache.prefill(layer, q, scale=scaling, check_finite=False)
        return out.to(query.dtype).reshape(1, tokens, heads, head_dim), None

    def _observe(self, layer, query):
        """Keeps the queries a policy reads and, after the last layer, compresses the prompt."""
        if self._what.reads_queries:
            q = query[0].transpose(0, 1)
            if self._observed is not None:  # a copy: the rest of the prompt's queries is freed
                q = q[-self._observed:].clone()
            self._prompt[layer][2] = q
        if layer != self._shape[0] - 1:
            return
        if any(p is None for p in self._prompt):
            raise razorkv.Error("razorkv.hf.RazorCache: the prompt reached the last layer "
                                "before every other layer")
        tokens = self._tokens[0]
        keys, values, queries = zip(*self._prompt)
        self._cache = razorkv.compress(self._what, list(keys), list(values),
                                       budget_entries=_budget_entries(self._budget, tokens),
                                       queries=list(queries) if queries[0] is not None else None,
                                       num_query_heads=self._shape[1],
                                       resource=self._resource)
        self._prompt = [None] * self._shape[0]


def _config_shape(config):
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return (config.num_hidden_layers, heads, getattr(config, "num_key_value_heads", None) or heads,
            head_dim)


def _budget_entries(budget, tokens):
    """Entries per kv head a policy's budget allows a prompt of `tokens` tokens."""
    if isinstance(budget, bool) or not isinstance(budget, (int, float)):
        raise razorkv.Error(f"razorkv.hf.RazorCache: budget must be a share of the full cache "
                            f"(a float in (0, 1]) or entries per kv head (an int >= 1), got "
                            f"{budget!r}")
    if isinstance(budget, int):
        if budget < 1:
            raise razorkv.Error(f"razorkv.hf.RazorCache: budget ({budget}) entries per kv head "
                                "must be >= 1")
        return budget
    if not 0 < budget <= 1:
        raise razorkv.Error(f"razorkv.hf.RazorCache: budget ({budget}) must be in (0, 1] as a "
                            "share of the full cache")
    return max(1, math.floor(budget * tokens))
