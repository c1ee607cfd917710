"""razorkv.torch on the trained model (examples/engine/model, defined in tools/train/model.py):
calibrating it in-process gives the scores of the C++ engine's calibration and of the CLI run
on dumps of the same tensors, and the committed plan."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import razorkv
import razorkv.torch

SOURCE = os.environ.get("RAZORKV_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODEL_DIR = os.path.join(SOURCE, "examples", "engine", "model")
sys.path.insert(0, os.path.join(SOURCE, "tools", "train"))
from model import apply_rope, load_safetensors, rope_tables  # noqa: E402


def post_rope_qk(attn, inputs, output):
    """The post-RoPE queries and keys of tools/train/model.py's Attention.forward(x, cos, sin)."""
    x, cos, sin = inputs[:3]
    batch, tokens, _ = x.shape
    cfg = attn.cfg
    q = attn.wq(x).view(batch, tokens, cfg.num_q_heads, cfg.head_dim).transpose(1, 2)
    k = attn.wk(x).view(batch, tokens, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


class TrainedModelCalibration(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.model = load_safetensors(os.path.join(MODEL_DIR, "model.safetensors")).eval()
        cfg = cls.model.cfg
        # The engine's probe (tiny_llama::probe_config_for): every byte id once, 4 copies.
        cls.probe = razorkv.Probe(period=cfg.vocab_size, repeats=4, vocab_max=cfg.vocab_size)
        cls.scores, cls.plan = razorkv.torch.calibrate(
            cls.model, cls.probe, [b.attn for b in cls.model.blocks], post_rope_qk,
            head_dim=cfg.head_dim)

    def test_scores_match_the_cxx_engines_calibration(self):
        engine = razorkv.load_scores(os.path.join(MODEL_DIR, "scores.json"))
        # PyTorch and the C++ engine compute the same float32 model with different summation
        # orders; the scores are means of probabilities, so they agree to float rounding.
        np.testing.assert_allclose(self.scores.echo, engine.echo, rtol=1e-4, atol=1e-7)
        np.testing.assert_allclose(self.scores.induction, engine.induction, rtol=1e-4, atol=1e-7)

    def test_the_plan_is_the_committed_plan(self):
        committed = razorkv.load_plan(os.path.join(MODEL_DIR, "plan.json"))
        np.testing.assert_array_equal(self.plan.retrieval_mask, committed.retrieval_mask)
        self.assertGreater(self.plan.num_retrieval, 0)

    @unittest.skipUnless(os.environ.get("RAZORKV_CLI"), "RAZORKV_CLI (the razorkv tool) not set")
    def test_scores_equal_the_clis_from_dumps_of_the_same_tensors(self):
        captured = []

        def dump(attn, inputs, output):
            q, k = post_rope_qk(attn, inputs, output)
            captured.append((q[0].transpose(0, 1).contiguous(), k[0].transpose(0, 1).contiguous()))
            return q, k

        scores = razorkv.torch.score_heads(self.model, self.probe,
                                           [b.attn for b in self.model.blocks], dump)
        with tempfile.TemporaryDirectory() as tmp:
            args = [os.environ["RAZORKV_CLI"], "score", "--period", str(self.probe.period),
                    "--repeats", "4", "--out", os.path.join(tmp, "scores.json")]
            for layer, (q, k) in enumerate(captured):
                # Layer 0 as np.save's default float64 (exact for float32 values), the rest as
                # float32.
                wide = np.float64 if layer == 0 else np.float32
                np.save(os.path.join(tmp, f"q{layer}.npy"), q.numpy().astype(wide))
                np.save(os.path.join(tmp, f"k{layer}.npy"), k.numpy().astype(wide))
                args += ["--q", os.path.join(tmp, f"q{layer}.npy"),
                         "--k", os.path.join(tmp, f"k{layer}.npy")]
            subprocess.run(args, check=True, capture_output=True)
            cli = razorkv.load_scores(os.path.join(tmp, "scores.json"))
            # The CLI records head_dim, so that select needs no --head-dim.
            subprocess.run([os.environ["RAZORKV_CLI"], "select", "--scores",
                            os.path.join(tmp, "scores.json"), "--out",
                            os.path.join(tmp, "plan.json")], check=True, capture_output=True)
            cli_plan = razorkv.load_plan(os.path.join(tmp, "plan.json"))
            np.testing.assert_array_equal(cli_plan.retrieval_mask, self.plan.retrieval_mask)
            self.assertEqual(cli_plan.shape, self.plan.shape)
        # The same float32 tensors through the same scorer: equal, not close.
        np.testing.assert_array_equal(scores.echo, cli.echo)
        np.testing.assert_array_equal(scores.induction, cli.induction)
        np.testing.assert_array_equal(scores.echo, self.scores.echo)

    def test_bfloat16_queries_and_keys_are_read_as_bfloat16(self):
        def bf16(attn, inputs, output):
            q, k = post_rope_qk(attn, inputs, output)
            return q.bfloat16(), k.bfloat16()

        scores = razorkv.torch.score_heads(self.model, self.probe,
                                           [b.attn for b in self.model.blocks], bf16)
        # Rounding q and k to 8 bits of mantissa moves the scores a little, not the ranking of
        # the strongest heads.
        np.testing.assert_allclose(scores.induction, self.scores.induction, rtol=0.1, atol=2e-3)
        plan = razorkv.select(scores, head_dim=self.model.cfg.head_dim)
        np.testing.assert_array_equal(plan.retrieval_mask, self.plan.retrieval_mask)

    def test_modules_called_with_keywords_hand_them_to_qk(self):
        # As Hugging Face models call their attention modules: every argument by keyword.
        def forward_by_keywords(model, tokens):
            cos, sin = rope_tables(model.cfg, tokens.shape[1], tokens.device)
            x = model.embed(tokens)
            for block in model.blocks:
                x = x + block.attn(x=block.attn_norm(x), cos=cos, sin=sin)
                x = x + block.ffn(block.ffn_norm(x))
            return model.lm_head(model.norm(x))

        def keyword_qk(attn, inputs, output, kwargs):
            self.assertEqual(inputs, ())
            return post_rope_qk(attn, (kwargs["x"], kwargs["cos"], kwargs["sin"]), output)

        attention = [b.attn for b in self.model.blocks]
        scores = razorkv.torch.score_heads(self.model, self.probe, attention, keyword_qk,
                                           forward=forward_by_keywords)
        np.testing.assert_array_equal(scores.induction, self.scores.induction)
        np.testing.assert_array_equal(scores.echo, self.scores.echo)
        # The modules are as they were: called again, nothing intercepts them.
        self.assertTrue(all("forward" not in vars(a) for a in attention))
        # A three-argument qk cannot see them, and the error says what to write instead.
        with self.assertRaisesRegex(razorkv.Error, "qk failed on layer 0 .* called with keyword "
                                    "arguments \\(x, cos, sin\\)"):
            razorkv.torch.score_heads(self.model, self.probe, attention, post_rope_qk,
                                      forward=forward_by_keywords)
        self.assertTrue(all("forward" not in vars(a) for a in attention))

    def test_a_module_that_never_runs_is_an_error(self):
        stray = torch.nn.Linear(2, 2)
        with self.assertRaisesRegex(razorkv.Error, r"layers \[4\] never ran"):
            razorkv.torch.score_heads(self.model, self.probe,
                                      [b.attn for b in self.model.blocks] + [stray], post_rope_qk)

    def test_wrong_shapes_from_qk_are_errors_naming_the_layer(self):
        def truncated(attn, inputs, output):
            q, k = post_rope_qk(attn, inputs, output)
            return q[:, :, :10], k

        with self.assertRaisesRegex(razorkv.Error, "queries.tokens\\(\\) \\(10\\)"):
            razorkv.torch.score_heads(self.model, self.probe, [self.model.blocks[0].attn],
                                      truncated)


if __name__ == "__main__":
    unittest.main()
