"""razorkv.hf on transformers models: tiny random Llama, Mistral and Qwen2 configs (2 layers,
GQA) whose scores must equal those of the models' own attention probabilities, a family it does
not know, and SmolLM2 loaded by transformers from its GGUF file (RAZORKV_SMOLLM2_GGUF), whose
calibration in one call must give the committed plan.

Needs torch and transformers (scripts/setup_hf_env.sh installs them into build/venv-hf)."""
import os
import unittest

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws tqdm's bars

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

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


@unittest.skipUnless(SMOLLM2, "RAZORKV_SMOLLM2_GGUF (scripts/get_model.sh) not set")
class SmolLM2(unittest.TestCase):
    def test_one_call_reproduces_the_committed_plan(self):
        torch.set_num_threads(2)
        folder, name = os.path.split(SMOLLM2)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32).eval()
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
