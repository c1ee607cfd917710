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
"""

import sys

import torch

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
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return (config.num_hidden_layers, heads, getattr(config, "num_key_value_heads", None) or heads,
            head_dim)


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
