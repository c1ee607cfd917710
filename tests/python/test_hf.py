"""razorkv.hf on transformers models: tiny random Llama, Mistral and Qwen2 configs (2 layers,
GQA) whose scores must equal those of the models' own attention probabilities and whose
generation over a RazorCache must equal the razor cache's attention written out in torch, a
family it does not know, and SmolLM2 loaded by transformers from its GGUF file
(RAZORKV_SMOLLM2_GGUF), whose calibration in one call must give the committed plan and whose
first decode step over a razor cache must give the C++ engine's logits.

Needs torch and transformers (python/requirements-hf.txt; scripts/check_pip_install.sh --hf
installs them beside razorkv and runs this file)."""
import os
import unittest

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws tqdm's bars

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

from transformers.integrations.sdpa_attention import sdpa_attention_forward  # noqa: E402
from transformers.masking_utils import sdpa_mask  # noqa: E402

import razorkv  # noqa: E402
import razorkv.hf  # noqa: E402

SOURCE = os.environ.get("RAZORKV_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMOLLM2 = os.environ.get("RAZORKV_SMOLLM2_GGUF", "")
transformers.utils.logging.disable_progress_bar()  # a test log, not a terminal


def tiny(family, **extra):
    """A random model of `family`: 2 layers, 4 query and 2 kv heads of dim 16."""
    config_class = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
                    "qwen2": transformers.Qwen2Config}[family]
    config = config_class(vocab_size=300, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                          max_position_embeddings=1024, attn_implementation="eager", **extra)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    # Sharper attention than the initialisation's, so that the scores are not all alike.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
    return model


class TinyModels(unittest.TestCase):
    def test_scores_are_those_of_the_models_own_attention(self):
        torch.set_num_threads(2)
        probe = razorkv.Probe(period=48, repeats=4, vocab_max=300, vocab_min=3, seed=1)
        for family in razorkv.hf.FAMILIES:
            with self.subTest(family=family):
                model = tiny(family)
                scores, plan = razorkv.hf.calibrate(model, probe, induction_ratio=0.5,
                                                    echo_ratio=0.0)
                self.assertEqual(plan.shape, (2, 4, 2, 16))
                self.assertEqual(razorkv.hf.model_shape(model), (2, 4, 2, 16))
                self.assertEqual(plan.num_retrieval, 2)
                # The reference: the eager attention's probabilities, scored as they are.
                tokens = torch.from_numpy(probe.tokens.copy())[None]
                with torch.no_grad():
                    out = model(input_ids=tokens, output_attentions=True, use_cache=False)
                for layer, attention in enumerate(out.attentions):
                    echo, induction = razorkv.score_probabilities(probe, attention[0].double())
                    np.testing.assert_allclose(scores.echo[layer], echo, rtol=1e-4, atol=1e-6)
                    np.testing.assert_allclose(scores.induction[layer], induction, rtol=1e-4,
                                               atol=1e-6)
                self.assertTrue(all("forward" not in vars(layer.self_attn)
                                    for layer in model.model.layers))

    def test_the_default_probe_fits_the_context(self):
        probe = razorkv.hf.default_probe(tiny("llama"))
        self.assertEqual((probe.period, probe.repeats), (256, 4))

    def test_a_family_it_does_not_know_is_an_error_naming_the_class(self):
        config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=50)
        model = transformers.GPT2LMHeadModel(config).eval()
        with self.assertRaisesRegex(razorkv.Error, "razorkv.hf.calibrate: GPT2LMHeadModel "
                                    "\\(model_type 'gpt2'\\) is not a model family razorkv.hf "
                                    "knows \\(llama, mistral, qwen2\\)"):
            razorkv.hf.calibrate(model)


def every_head(shape):
    """A plan for `shape` that keeps every kv group whole."""
    plan = razorkv.HeadPlan(shape)
    for layer in range(shape[0]):
        for group in range(shape[2]):
            plan.set_retrieval(layer, group)
    return plan


def generate(model, ids, cache=None, steps=8):
    """Greedy generation: (tokens, [steps, vocab] logits)."""
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                             max_new_tokens=steps, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=0)
    return out.sequences, torch.cat(out.logits)


def kept_attention(is_retrieval, sinks, window_start, compensation):
    """transformers' attention function for what a compressed cache holds, computed in float64
    from the whole K/V that a DynamicCache hands it: the prompt attends densely; at a decode
    step a local kv group (not is_retrieval(layer, group)) reads its first `sinks` tokens, the
    tokens from window_start(tokens so far) on and, with `compensation`, the mean key and value
    of the tokens in between, whose logit gets + ln(their count)."""
    def attend(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        if query.shape[2] > 1:
            return sdpa_attention_forward(module, query, key, value, attention_mask,
                                          dropout=dropout, scaling=scaling, **kwargs)
        heads, kv_heads, head_dim = query.shape[1], key.shape[1], query.shape[3]
        out = torch.empty(heads, head_dim, dtype=torch.float64)
        for h in range(heads):
            group = h // (heads // kv_heads)
            q, k, v = query[0, h, 0].double(), key[0, group].double(), value[0, group].double()
            logits = k @ q * scaling
            if not is_retrieval(module.layer_idx, group):
                start = window_start(k.shape[0])
                kept = torch.cat([torch.arange(sinks), torch.arange(start, k.shape[0])])
                dropped = torch.arange(sinks, start)
                logits, v_kept = logits[kept], v[kept]
                if compensation and len(dropped):
                    mean_k, mean_v = k[dropped].mean(0), v[dropped].mean(0)
                    weighted = mean_k @ q * scaling + np.log(len(dropped))
                    logits = torch.cat([logits, weighted[None]])
                    v_kept = torch.cat([v_kept, mean_v[None]])
                v = v_kept
            out[h] = torch.softmax(logits, 0) @ v
        return out.to(query.dtype).reshape(1, 1, heads, head_dim), None
    return attend


def reference_generation(model, ids, attention, steps=8):
    """generate() with a DynamicCache and `attention` as the model's attention function."""
    use_reference(model, attention)
    return generate(model, ids, steps=steps)


def use_reference(model, attention):
    """Makes `attention` the model's attention function (as "razor_reference")."""
    transformers.AttentionInterface.register("razor_reference", attention)
    transformers.AttentionMaskInterface.register("razor_reference", sdpa_mask)
    model.set_attn_implementation("razor_reference")


class TinyModelsGenerate(unittest.TestCase):
    """Generation over razorkv.hf.RazorCache on tiny random models."""

    def setUp(self):
        torch.manual_seed(1)
        self.ids = torch.randint(0, 300, (1, 150))

    def model(self, family="llama"):
        return tiny(family, tie_word_embeddings=False)

    def test_a_plan_keeping_every_head_generates_as_transformers_own_cache(self):
        for family in razorkv.hf.FAMILIES:
            with self.subTest(family=family):
                model = self.model(family)
                model.set_attn_implementation("sdpa")
                want_ids, want = generate(model, self.ids)
                plan = every_head(razorkv.hf.model_shape(model))
                cache = razorkv.hf.RazorCache(plan, model.config)  # the config switches too
                got_ids, got = generate(model, self.ids, cache)
                torch.testing.assert_close(got_ids, want_ids, rtol=0, atol=0)
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
                self.assertEqual(model.config._attn_implementation, razorkv.hf.ATTENTION)
                self.assertEqual(cache.get_seq_length(), 150 + 7)
                self.assertEqual(cache.kv_bytes(), cache.dense_kv_bytes())

    def test_half_precision_models_keep_their_dtype(self):
        for dtype, name in ((torch.bfloat16, "bfloat16"), (torch.float16, "float16")):
            with self.subTest(dtype=name):
                model = self.model().to(dtype)
                model.set_attn_implementation("sdpa")
                want_ids, want = generate(model, self.ids)
                plan = every_head(razorkv.hf.model_shape(model))
                cache = razorkv.hf.RazorCache(plan, model)
                got_ids, got = generate(model, self.ids, cache)
                self.assertEqual(cache.razorkv_cache.dtype, name)
                torch.testing.assert_close(got_ids, want_ids, rtol=0, atol=0)
                # Both round each step's output to the model's dtype: a few of its ulps apart.
                torch.testing.assert_close(got.float(), want.float(), rtol=0, atol=1e-2)

    def test_compressed_heads_attend_to_sinks_window_and_the_weighted_mean(self):
        model = self.model()
        plan = razorkv.HeadPlan(razorkv.hf.model_shape(model))
        plan.set_retrieval(1, 0)
        # A window of max(s0, ceil(150 / 5)) = 40 prompt tokens, 106 folded per local group.
        config = razorkv.RazorConfig(sinks=4, s0=40, c=5)
        want_ids, want = reference_generation(
            model, self.ids, kept_attention(plan.is_retrieval, 4, lambda n: 150 - 40, True))
        cache = razorkv.hf.RazorCache(plan, model, config=config)
        got_ids, got = generate(model, self.ids, cache)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got_ids, want_ids, rtol=0, atol=0)
        self.assertEqual(cache.razorkv_cache.dropped_tokens(), 3 * 106)
        self.assertLess(cache.kv_bytes(), 0.5 * cache.dense_kv_bytes())

    def test_baselines_through_one_argument(self):
        model = self.model()
        model.set_attn_implementation("sdpa")
        want_ids, want = generate(model, self.ids)
        got_ids, got = generate(model, self.ids, razorkv.hf.RazorCache(razorkv.Policy.full(),
                                                                       model, budget=1.0))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # StreamingLLM at a third: 4 sinks and a window of 50 - 4 tokens that slides.
        want_ids, want = reference_generation(
            model, self.ids, kept_attention(lambda layer, group: False, 4, lambda n: n - 46, False))
        cache = razorkv.hf.RazorCache(razorkv.Policy.streaming_llm(), model, budget=1 / 3)
        got_ids, got = generate(model, self.ids, cache)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        self.assertEqual(cache.kv_bytes(), 2 * 2 * 50 * 2 * 16 * 4)  # layers, groups, K and V
        # SnapKV and H2O read the prompt's queries; SnapKV keeps what decode appends, H2O evicts.
        for policy, entries in ((razorkv.Policy.snapkv(), 51),
                                (razorkv.Policy.h2o(observed_queries=32), 50)):
            cache = razorkv.hf.RazorCache(policy, model, budget=50, observed_queries=32)
            generate(model, self.ids, cache, steps=2)
            self.assertEqual(cache.razorkv_cache.entries(0, 0), entries, policy.name)

    def test_several_new_tokens_at_once_attend_causally(self):
        model = self.model()
        plan = razorkv.HeadPlan(razorkv.hf.model_shape(model))
        config = razorkv.RazorConfig(sinks=4, s0=40, c=5)
        cache = razorkv.hf.RazorCache(plan, model, config=config)
        more = torch.randint(0, 300, (1, 5))
        with torch.no_grad():
            model(self.ids, past_key_values=cache)
            together = model(more, past_key_values=cache).logits[0]
            use_reference(model, kept_attention(plan.is_retrieval, 4, lambda n: 150 - 40, True))
            reference = transformers.DynamicCache()
            model(self.ids, past_key_values=reference)
            one_by_one = torch.cat([model(more[:, i:i + 1], past_key_values=reference).logits[0]
                                    for i in range(5)])
        torch.testing.assert_close(together, one_by_one, rtol=1e-4, atol=1e-4)

    def test_what_it_cannot_do_is_an_error_naming_it(self):
        model = self.model()
        shape = razorkv.hf.model_shape(model)
        plan = razorkv.HeadPlan(shape)
        cases = [
            (lambda: razorkv.hf.RazorCache("plan.json", model), "got a str"),
            (lambda: razorkv.hf.RazorCache(razorkv.HeadPlan((3, 4, 2, 16)), model),
             r"plan's shape \(3, 4, 2, 16\) is not the model's \(2, 4, 2, 16\)"),
            (lambda: razorkv.hf.RazorCache(plan, model, budget=0.5), "budget and observed"),
            (lambda: razorkv.hf.RazorCache(razorkv.Policy.h2o(), model, budget=1.5),
             r"budget \(1.5\) must be in \(0, 1\]"),
            (lambda: razorkv.hf.RazorCache(razorkv.Policy.h2o(), model), "got None"),
            (lambda: razorkv.hf.RazorCache(plan, transformers.GPT2Config()), "GPT2Config"),
        ]
        for make, message in cases:
            with self.assertRaisesRegex(razorkv.Error, message):
                make()
        two = self.ids.repeat(2, 1)
        with self.assertRaisesRegex(razorkv.Error, "one sequence; the batch has 2"):
            generate(model, two, razorkv.hf.RazorCache(plan, model))
        with self.assertRaisesRegex(razorkv.Error, "the batch has 2 .beam search"):
            with torch.no_grad():
                model.generate(self.ids, past_key_values=razorkv.hf.RazorCache(plan, model),
                               max_new_tokens=3, num_beams=2, pad_token_id=0)
        padded = torch.ones_like(self.ids)
        padded[0, :3] = 0
        with self.assertRaisesRegex(razorkv.Error, "hides tokens .padding."):
            with torch.no_grad():
                model.generate(self.ids, attention_mask=padded, max_new_tokens=2, pad_token_id=0,
                               past_key_values=razorkv.hf.RazorCache(plan, model))
        cache = razorkv.hf.RazorCache(plan, model, config=razorkv.RazorConfig(s0=40))
        with torch.no_grad():
            model(self.ids, past_key_values=cache)
            with self.assertRaisesRegex(razorkv.Error, "more than the 40"):
                model(torch.zeros((1, 41), dtype=torch.long), past_key_values=cache)
        self.assertEqual([cache.get_seq_length(layer) for layer in range(2)], [150, 150])


@unittest.skipUnless(SMOLLM2, "RAZORKV_SMOLLM2_GGUF (scripts/get_model.sh) not set")
class SmolLM2(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        folder, name = os.path.split(SMOLLM2)
        cls.model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32).eval()
        committed = os.path.join(SOURCE, "examples", "engine", "smollm2")
        cls.plan = razorkv.load_plan(os.path.join(committed, "plan.json"))
        cls.ids = torch.from_numpy(
            np.load(os.path.join(committed, "llama_cpp", "heldout_ids.npy")).astype(np.int64))

    def test_a_plan_keeping_every_head_generates_as_transformers_own_cache(self):
        model, prompt = self.model, self.ids[None, :300]
        model.set_attn_implementation("sdpa")
        want_ids, want = generate(model, prompt)
        plan = every_head(self.plan.shape)
        got_ids, got = generate(model, prompt, razorkv.hf.RazorCache(plan, model))
        torch.testing.assert_close(got_ids, want_ids, rtol=0, atol=0)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    def test_the_first_decode_step_over_a_razor_cache_gives_the_engines_logits(self):
        # The C++ engine's step (RazorkvSmolLM2.RazorDecodeLogitsEqualTheCommittedOnes): the
        # committed plan, a 600-token prompt, local heads keeping 4 sinks and 120 tokens.
        cache = razorkv.hf.RazorCache(self.plan, self.model, config=razorkv.RazorConfig(s0=64))
        with torch.no_grad():
            self.model(self.ids[None, :600], past_key_values=cache)
            logits = self.model(self.ids[None, 600:601], past_key_values=cache).logits[0, 0]
        self.assertEqual(cache.razorkv_cache.dropped_tokens(), 76 * (600 - 4 - 120))
        engine = torch.from_numpy(np.load(os.path.join(SOURCE, "examples", "engine", "smollm2",
                                                       "razor_decode_logits.npy")))
        torch.testing.assert_close(logits, engine, rtol=0, atol=1e-4 * engine.abs().max().item())

    def test_one_call_reproduces_the_committed_plan(self):
        model = self.model
        # The engine's probe (tiny_llama::probe_config_for): 2,048 ids after the 17 control
        # tokens, 4 copies.
        probe = razorkv.hf.default_probe(model, vocab_min=17)
        self.assertEqual(probe.period, 2048)
        scores, plan = razorkv.hf.calibrate(model, probe)
        committed = os.path.join(SOURCE, "examples", "engine", "smollm2")
        expected = razorkv.load_plan(os.path.join(committed, "plan.json"))
        np.testing.assert_array_equal(plan.retrieval_mask, expected.retrieval_mask)
        engine = razorkv.load_scores(os.path.join(committed, "scores.json"))
        # transformers and the C++ engine run the same float32 weights in different orders.
        np.testing.assert_allclose(scores.induction, engine.induction, rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(scores.echo, engine.echo, rtol=1e-3, atol=1e-5)


if __name__ == "__main__":
    unittest.main()
