"""razorkv.GgufFile and razorkv.torch on SmolLM2-135M: the GGUF file read from Python into a
PyTorch model (tools/smollm2/torch_model.py), calibrated in-process through razorkv.torch with
the C++ engine's probe, gives the C++ engine's scores and the committed plan."""
import os
import sys
import unittest

import numpy as np
import torch

import razorkv
import razorkv.torch

SOURCE = os.environ.get("RAZORKV_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODEL = os.environ.get("RAZORKV_SMOLLM2_GGUF", "")
DIR = os.path.join(SOURCE, "examples", "engine", "smollm2")
sys.path.insert(0, os.path.join(SOURCE, "tools", "smollm2"))
from torch_model import SmolLM2, post_rope_qk  # noqa: E402


@unittest.skipUnless(MODEL, "RAZORKV_SMOLLM2_GGUF (scripts/get_model.sh's file) not set")
class SmolLM2Calibration(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(2)
        cls.file = razorkv.GgufFile(MODEL)
        cls.model = SmolLM2(MODEL)
        # The engine's probe (tiny_llama::probe_config_for): 2,048 distinct ids after the 17
        # control tokens, 4 copies: the 8,192-token context.
        cls.probe = razorkv.Probe(period=2048, repeats=4, vocab_max=49152, vocab_min=17)
        cls.scores, cls.plan = razorkv.torch.calibrate(
            cls.model, cls.probe, list(cls.model.attention), post_rope_qk, head_dim=64)

    def test_the_file_reads_from_python(self):
        self.assertEqual(self.file.version, 3)
        self.assertEqual(self.file["llama.block_count"], 30)
        self.assertAlmostEqual(self.file["llama.rope.freq_base"], 100000.0)
        self.assertFalse(self.file["tokenizer.ggml.add_bos_token"])
        self.assertEqual(len(self.file["tokenizer.ggml.tokens"]), 49152)
        self.assertEqual(self.file["tokenizer.ggml.tokens"][1], "<|im_start|>")
        self.assertIn("general.name", self.file)
        self.assertEqual(self.file.tensor_type("blk.0.attn_q.weight"), "Q4_1")
        embed = self.file.tensor("token_embd.weight")
        self.assertEqual(embed.shape, (49152, 576))
        self.assertEqual(embed.dtype, np.float32)
        self.assertIsNone(self.file.plan())
        with self.assertRaises(KeyError):
            self.file["no.such.key"]
        with self.assertRaisesRegex(razorkv.Error, 'no tensor named "nope"'):
            self.file.tensor("nope")

    def test_scores_match_the_cxx_engines_calibration(self):
        engine = razorkv.load_scores(os.path.join(DIR, "scores.json"))
        # The same weights in float32 through two forwards that sum in different orders.
        np.testing.assert_allclose(self.scores.echo, engine.echo, rtol=0, atol=2e-4)
        np.testing.assert_allclose(self.scores.induction, engine.induction, rtol=0, atol=2e-4)

    def test_the_plan_is_the_committed_plan(self):
        committed = razorkv.load_plan(os.path.join(DIR, "plan.json"))
        np.testing.assert_array_equal(self.plan.retrieval_mask, committed.retrieval_mask)
        self.assertEqual(self.plan.num_retrieval, 14)


if __name__ == "__main__":
    unittest.main()
