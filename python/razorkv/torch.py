"""razorkv.torch: calibrates a PyTorch model in-process.

The model prefills razorkv's probe once. Each attention module's call is intercepted (its
`forward`, for that one run), and that layer's post-RoPE queries and keys (a function of the
module's arguments and output, which the caller writes for their model: `qk`) go straight to
razorkv's streaming scorer, so no layer's tensors outlive the call, nothing is written to files
and no L x L attention matrix is formed. Then the retrieval heads are selected as
`razorkv select` does. Modules called with keyword arguments (as Hugging Face models call
theirs) hand them to a `qk` that takes a fourth argument.

    import razorkv, razorkv.torch
    probe = razorkv.Probe(period=256, repeats=4, vocab_max=vocab_size)
    scores = razorkv.torch.score_heads(model, probe, [b.attn for b in model.blocks], qk)
    plan = razorkv.select(scores, head_dim=head_dim)
    razorkv.save_plan(plan, "plan.json")
"""

import inspect

import torch

import razorkv


def _token_major(x, name, layer):
    """[L, heads, head_dim] view of a layer's queries or keys given as [L, heads, head_dim] or,
    as attention code holds them, [1, heads, L, head_dim] (no copy)."""
    if not isinstance(x, torch.Tensor):
        raise razorkv.Error(f"razorkv.torch: qk returned a {type(x).__name__} as the {name} of "
                            f"layer {layer}; expected a torch.Tensor")
    if x.dim() == 4:
        if x.shape[0] != 1:
            raise razorkv.Error(f"razorkv.torch: the {name} of layer {layer} have batch "
                                f"{x.shape[0]}; the probe runs as a batch of 1")
        return x[0].transpose(0, 1)
    if x.dim() != 3:
        raise razorkv.Error(f"razorkv.torch: the {name} of layer {layer} have shape "
                            f"{tuple(x.shape)}; expected [L, heads, head_dim] or "
                            "[1, heads, L, head_dim]")
    return x


def _takes_kwargs(qk):
    """Whether qk is called as qk(module, inputs, output, kwargs)."""
    try:
        inspect.signature(qk).bind(None, None, None, None)
    except (TypeError, ValueError):  # ValueError: no signature; the documented three arguments
        return False
    return True


def _intercept(module, on_call):
    """Makes module's calls run on_call(module, args, kwargs, output) after its forward; returns
    what undoes it. The instance's forward is replaced, not hooked: torch's forward hooks see
    keyword arguments only from torch 2.0 on, and this sees them on every version."""
    own = "forward" in vars(module)
    original = module.forward

    def forward(*args, **kwargs):
        output = original(*args, **kwargs)
        on_call(module, args, kwargs, output)
        return output

    module.forward = forward

    def undo():
        if own:
            module.forward = original
        else:
            del module.forward

    return undo


def score_heads(model, probe, attention_modules, qk, *, scale=None, row_step=1, forward=None):
    """Echo and induction scores of every query head (a razorkv.HeadScores).

    model: the torch.nn.Module; it runs once on the probe under torch.no_grad().
    probe: a razorkv.Probe.
    attention_modules: the model's attention modules, one per layer, in layer order.
    qk(module, inputs, output) -> (queries, keys): the post-RoPE queries and keys the module
        computed in that forward, [L, heads, head_dim] or [1, heads, L, head_dim]; `inputs` is
        the tuple of the module's positional arguments. A qk that takes a fourth argument,
        qk(module, inputs, output, kwargs), gets the dict of its keyword arguments too. Query
        head h reads kv head h // (query heads / kv heads).
    scale: the softmax scale (default 1/sqrt(head_dim)); row_step: score every k-th row.
    forward(model, tokens): runs the model on the probe tokens, int64 [1, L] (default:
        model(tokens)).
    """
    modules = list(attention_modules)
    if not modules:
        raise razorkv.Error("razorkv.torch.score_heads: attention_modules is empty")
    layer_of = {id(m): i for i, m in enumerate(modules)}
    if len(layer_of) != len(modules):
        raise razorkv.Error("razorkv.torch.score_heads: a module appears twice in "
                            "attention_modules")
    scored = [None] * len(modules)

    with_kwargs = _takes_kwargs(qk)

    def on_call(module, inputs, kwargs, output):
        layer = layer_of[id(module)]
        if scored[layer] is not None:
            raise razorkv.Error(f"razorkv.torch.score_heads: layer {layer}'s module ran twice "
                                "during one forward")
        if with_kwargs:
            queries, keys = qk(module, inputs, output, kwargs)
        else:
            try:
                queries, keys = qk(module, inputs, output)
            except (TypeError, ValueError, IndexError, KeyError) as e:
                if not kwargs:
                    raise
                raise razorkv.Error(
                    f"razorkv.torch.score_heads: qk failed on layer {layer} ({e}); the module was "
                    f"called with keyword arguments ({', '.join(kwargs)}), which a qk taking "
                    "a fourth argument, qk(module, inputs, output, kwargs), receives") from e
        queries = _token_major(queries, "queries", layer)
        keys = _token_major(keys, "keys", layer)
        echo, induction = razorkv.score_queries_keys(probe, queries, keys, scale=scale,
                                                     row_step=row_step)
        scored[layer] = (queries.shape[1], keys.shape[1], echo, induction)

    undo = [_intercept(m, on_call) for m in modules]
    tokens = torch.from_numpy(probe.tokens.copy())[None]
    try:
        with torch.no_grad():
            if forward is None:
                model(tokens)
            else:
                forward(model, tokens)
    finally:
        for u in undo:
            u()

    missing = [i for i, s in enumerate(scored) if s is None]
    if missing:
        raise razorkv.Error(f"razorkv.torch.score_heads: layers {missing} never ran; are the "
                            "attention modules the ones the model calls?")
    query_heads, kv_heads = scored[0][0], scored[0][1]
    scores = razorkv.HeadScores(len(modules), query_heads, kv_heads)
    for layer, (q_heads, k_heads, echo, induction) in enumerate(scored):
        if (q_heads, k_heads) != (query_heads, kv_heads):
            raise razorkv.Error(f"razorkv.torch.score_heads: layer {layer} has {q_heads} query "
                                f"and {k_heads} kv heads, layer 0 {query_heads} and {kv_heads}")
        scores.set_layer(layer, echo.tolist(), induction.tolist())
    return scores


def calibrate(model, probe, attention_modules, qk, *, head_dim, induction_ratio=0.14,
              echo_ratio=0.01, gqa="sum", min_per_layer=0, **scoring):
    """score_heads, then razorkv.select: returns (scores, plan)."""
    scores = score_heads(model, probe, attention_modules, qk, **scoring)
    plan = razorkv.select(scores, head_dim=head_dim, induction_ratio=induction_ratio,
                          echo_ratio=echo_ratio, gqa=gqa, min_per_layer=min_per_layer)
    return scores, plan
