"""The razorkv Python module against numpy: scoring, plans and their files, ALiBi selection, the
calculator, the RazorAttention cache and the baseline policies, memory pools, paged K/V, zero-copy
inputs and errors."""
import gc
import os
import tempfile
import inspect
import unittest
import weakref

import numpy as np

import razorkv

try:
    import torch
except ImportError:  # the torch cases are skipped; everything else runs on numpy
    torch = None

rng = np.random.default_rng(7)


def softmax_attention(q, keys, values, log_weights=None):
    """Reference attention of one query [d] over keys/values [n, d] (scale 1/sqrt(d))."""
    logits = keys.astype(np.float64) @ q.astype(np.float64) / np.sqrt(q.shape[0])
    if log_weights is not None:
        logits = logits + log_weights
    p = np.exp(logits - logits.max())
    return (p / p.sum()) @ values.astype(np.float64)


def razor_reference(q, keys, values, sinks, window):
    """One non-retrieval head of the RazorAttention cache: sinks, the compensation token (mean
    key and value of the dropped middle, logit + ln D), the last `window` tokens."""
    n = keys.shape[0]
    middle = slice(sinks, n - window)
    kept_k = np.concatenate([keys[:sinks], keys[middle].mean(0, keepdims=True), keys[n - window:]])
    kept_v = np.concatenate([values[:sinks], values[middle].mean(0, keepdims=True),
                             values[n - window:]])
    weights = np.zeros(kept_k.shape[0])
    weights[sinks] = np.log(n - window - sinks)
    return softmax_attention(q, kept_k, kept_v, weights)


def causal_probabilities(q, k):
    """[heads, L, L] softmax(q.k / sqrt(d)) with the causal mask; query head h reads kv head
    h // group."""
    length, heads, dim = q.shape
    group = heads // k.shape[1]
    out = np.empty((heads, length, length))
    for h in range(heads):
        logits = q[:, h, :].astype(np.float64) @ k[:, h // group, :].astype(np.float64).T
        logits /= np.sqrt(dim)
        logits[np.triu_indices(length, 1)] = -np.inf
        p = np.exp(logits - logits.max(1, keepdims=True))
        out[h] = p / p.sum(1, keepdims=True)
    return out


class Scoring(unittest.TestCase):
    def test_queries_keys_scores_equal_the_scores_of_their_probabilities(self):
        probe = razorkv.Probe(period=40, repeats=3, vocab_max=1000, seed=3)
        n = len(probe)
        q = rng.standard_normal((n, 4, 8)).astype(np.float32)
        k = rng.standard_normal((n, 2, 8)).astype(np.float32)
        # Plant an induction head: query i looks like the key after i's earlier copy.
        q[40:, 1, :] = 3 * k[1:n - 39, 0, :]
        echo, induction = razorkv.score_queries_keys(probe, q, k)
        echo_p, induction_p = razorkv.score_probabilities(probe, causal_probabilities(q, k))
        np.testing.assert_allclose(echo, echo_p, rtol=1e-5, atol=1e-9)
        np.testing.assert_allclose(induction, induction_p, rtol=1e-5, atol=1e-9)
        self.assertEqual(int(np.argmax(induction)), 1)

    def test_strided_and_float16_inputs_are_read_as_given(self):
        probe = razorkv.Probe(period=16, repeats=4, vocab_max=500)
        n = len(probe)
        hnd_q = rng.standard_normal((2, n, 8)).astype(np.float16)  # head-major, as torch holds it
        hnd_k = rng.standard_normal((1, n, 8)).astype(np.float16)
        strided = razorkv.score_queries_keys(probe, hnd_q.transpose(1, 0, 2),
                                             hnd_k.transpose(1, 0, 2))
        dense = razorkv.score_queries_keys(
            probe, np.ascontiguousarray(hnd_q.transpose(1, 0, 2)).astype(np.float32),
            np.ascontiguousarray(hnd_k.transpose(1, 0, 2)).astype(np.float32))
        np.testing.assert_allclose(strided[0], dense[0], rtol=1e-5)
        np.testing.assert_allclose(strided[1], dense[1], rtol=1e-5)

    def test_scores_json_round_trips(self):
        scores = razorkv.HeadScores(2, 4, 2)
        for layer in range(2):
            scores.set_layer(layer, list(rng.random(4)), list(rng.random(4)))
        again = razorkv.HeadScores.from_json(scores.to_json())
        np.testing.assert_array_equal(again.echo, scores.echo)
        np.testing.assert_array_equal(again.induction, scores.induction)

    def test_bad_input_is_a_razorkv_error_naming_the_value(self):
        probe = razorkv.Probe(period=8, repeats=2, vocab_max=100)
        with self.assertRaisesRegex(razorkv.Error, r"row_step \(0\) must be > 0"):
            razorkv.score_queries_keys(probe, np.zeros((16, 2, 4), np.float32),
                                       np.zeros((16, 2, 4), np.float32), row_step=0)
        with self.assertRaisesRegex(razorkv.Error, "int32 is not a storage dtype"):
            razorkv.score_queries_keys(probe, np.zeros((16, 2, 4), np.int32),
                                       np.zeros((16, 2, 4), np.int32))
        with self.assertRaisesRegex(razorkv.Error, "queries must have 3 dimensions, has 2"):
            razorkv.score_queries_keys(probe, np.zeros((16, 8), np.float32),
                                       np.zeros((16, 2, 4), np.float32))
        with self.assertRaisesRegex(ValueError, "repeats"):  # razorkv.Error is a ValueError
            razorkv.Probe(period=8, repeats=1, vocab_max=100)


def scores_with_favourites(layers=3, query_heads=4, kv_heads=2):
    scores = razorkv.HeadScores(layers, query_heads, kv_heads)
    for layer in range(layers):
        induction = [0.01] * query_heads
        if layer == 1:
            induction[3] = 0.9  # kv group 1 of layer 1
        scores.set_layer(layer, [0.001] * query_heads, induction)
    return scores


class Documentation(unittest.TestCase):
    @staticmethod
    def undocumented():
        """Public names, and their public members, whose docstring is missing or is only the
        signature pybind11 generates."""
        def bare(doc, name):
            lines = [line for line in (doc or "").strip().splitlines() if line.strip()]
            return all(line.startswith((name + "(", "Overloaded function")) or line[:2].isdigit()
                       for line in lines)

        missing = []
        for name in razorkv.__all__:
            obj = getattr(razorkv, name)
            if bare(inspect.getdoc(obj), name):
                missing.append(name)
            if not inspect.isclass(obj):
                continue
            for klass in obj.__mro__:
                if not klass.__module__.startswith("razorkv"):
                    continue
                for member, value in vars(klass).items():
                    if member.startswith("_") and member != "__init__":
                        continue
                    doc = getattr(value, "__doc__", None)
                    if not isinstance(value, property) and callable(getattr(obj, member)):
                        doc = inspect.getdoc(getattr(obj, member))
                    if bare(doc, member) and f"{name}.{member}" not in missing:
                        missing.append(f"{name}.{member}")
        return missing

    def test_every_public_name_and_member_has_a_docstring(self):
        self.assertEqual(self.undocumented(), [])


class Plans(unittest.TestCase):
    def test_a_shape_beyond_the_cell_cap_is_an_error_not_a_crash(self):
        # 2^32 x 2^32 cells wrapped to 0, and set_retrieval then wrote past an empty vector.
        with self.assertRaisesRegex(razorkv.Error, "exceeds 1048576 cells"):
            razorkv.HeadPlan((2**32, 2**32, 2**32, 1)).set_retrieval(1, 3)
        with self.assertRaisesRegex(razorkv.Error, "exceeds 1048576 cells"):
            razorkv.HeadScores(2**20, 2, 1)

    def test_selection_keeps_the_strongest_group(self):
        plan = razorkv.select(scores_with_favourites(), head_dim=64, induction_ratio=0.2,
                              echo_ratio=0.0)
        self.assertEqual(plan.shape, (3, 4, 2, 64))
        self.assertEqual(plan.num_retrieval, 1)
        self.assertTrue(plan.is_retrieval(1, 1))
        with self.assertRaisesRegex(razorkv.Error,
                                    "gqa \\('median'\\) must be one of 'sum', 'max', 'mean'"):
            razorkv.select(scores_with_favourites(), head_dim=64, gqa="median")

    def test_every_format_round_trips_through_files(self):
        plan = razorkv.select(scores_with_favourites(), head_dim=64, induction_ratio=0.4)
        with tempfile.TemporaryDirectory() as tmp:
            for fmt in ("razorkv", "mindspore", "duoattention"):
                path = os.path.join(tmp, "plan." + fmt)
                razorkv.save_plan(plan, path, format=fmt)
                shape = None if fmt == "razorkv" else plan.shape
                again = razorkv.load_plan(path, shape=shape)  # the format is recognised
                np.testing.assert_array_equal(again.retrieval_mask, plan.retrieval_mask, fmt)

    def test_duoattention_gates_by_threshold_or_sparsity(self):
        tsv = "0.9\t0.1\n0.4\t0.6\n"
        by_threshold = razorkv.HeadPlan.parse(tsv, shape=(2, 2, 2, 16))
        np.testing.assert_array_equal(by_threshold.retrieval_mask, [[1, 0], [0, 1]])
        by_sparsity = razorkv.HeadPlan.parse(tsv, shape=(2, 2, 2, 16), sparsity=0.75)
        np.testing.assert_array_equal(by_sparsity.retrieval_mask, [[1, 0], [0, 0]])

    def test_a_file_without_its_shape_needs_one(self):
        with self.assertRaisesRegex(razorkv.Error, "mindspore plan does not carry the model's shape"):
            razorkv.HeadPlan.parse('{"0": [1]}')
        with self.assertRaisesRegex(razorkv.Error, 'plan format \\("xml"\\)'):
            razorkv.HeadPlan.parse('{"0": [1]}', format="xml")

    def test_the_calculator_counts_bytes(self):
        shape = razorkv.model_presets()["llama-3-8b"]
        self.assertEqual(razorkv.full_kv_bytes(shape, 1000, 2), 2 * 32 * 8 * 128 * 1000 * 2)
        plan = razorkv.HeadPlan(shape)
        n = 100_000
        # No retrieval head: every head holds 4 sinks, 1 compensation token, N/5 recent tokens.
        expected = 2 * 32 * 8 * 128 * 2 * (4 + 1 + n // 5)
        self.assertEqual(razorkv.compressed_kv_bytes(plan, n), expected)
        # q8 rows: 34 bytes per 32 values, for the window only (sinks and mean stay 2 bytes).
        q8_row = 128 // 32 * 34
        self.assertEqual(razorkv.full_kv_bytes(shape, 1000, 2, storage="q8"),
                         2 * 32 * 8 * 1000 * q8_row)
        self.assertEqual(razorkv.compressed_kv_bytes(plan, n, storage="q8"),
                         2 * 32 * 8 * ((4 + 1) * 128 * 2 + n // 5 * q8_row))


class AlibiPlans(unittest.TestCase):
    """ALiBi selection: each group's span (2B - ln eps) / slope, from its flattest head."""

    def test_slopes_are_press_et_al_s(self):
        np.testing.assert_allclose(razorkv.alibi_slopes(8), [2.0 ** -i for i in range(1, 9)])
        # 12 heads: the 8 of 8 heads, then every other slope of 16 heads.
        sixteen = [2.0 ** (-0.5 * i) for i in range(1, 17)]
        np.testing.assert_allclose(razorkv.alibi_slopes(12),
                                   [2.0 ** -i for i in range(1, 9)] + sixteen[0:8:2])
        self.assertAlmostEqual(razorkv.alibi_span(0.25, 2.0, eps=1e-2),
                               (4.0 - np.log(1e-2)) / 0.25)
        self.assertAlmostEqual(razorkv.alibi_logit_bound(3.0, 2.0, 0.5), 6.0)

    def spans(self, slopes, bound, eps, group):
        per_head = (2 * bound - np.log(eps)) / np.asarray(slopes)
        return per_head.reshape(-1, group).max(axis=1)

    def test_long_span_groups_are_kept_and_the_rest_get_their_span(self):
        shape = (2, 8, 4, 16)
        slopes = razorkv.alibi_slopes(8)
        spans = self.spans(slopes, 1.0, 1e-3, 2)  # about 36, 143, 570 and 2280 tokens
        plan = razorkv.select_alibi(shape, slopes, bound=1.0, seq_len=500)
        self.assertEqual(plan.method, "alibi span")
        for layer in range(2):
            for group in range(4):
                kept = spans[group] >= 500
                self.assertEqual(plan.is_retrieval(layer, group), kept, (layer, group))
                expected = None if kept else int(np.ceil(spans[group]))
                self.assertEqual(plan.buffer_override(layer, group), expected, (layer, group))
        self.assertEqual(plan.num_retrieval, 4)

    def test_a_ratio_keeps_that_share_of_groups_by_span(self):
        shape = (2, 8, 4, 16)
        plan = razorkv.select_alibi(shape, razorkv.alibi_slopes(8), bound=1.0, ratio=0.25)
        # 2 of the 8 (layer, group) cells: the flattest group in each layer.
        np.testing.assert_array_equal(plan.retrieval_mask, [[0, 0, 0, 1], [0, 0, 0, 1]])

    def test_bad_input_names_the_value(self):
        shape = (1, 8, 4, 16)
        slopes = razorkv.alibi_slopes(8)
        with self.assertRaisesRegex(razorkv.Error, "give seq_len or ratio, not both"):
            razorkv.select_alibi(shape, slopes, seq_len=100, ratio=0.5)
        with self.assertRaisesRegex(razorkv.Error, "give seq_len or ratio, not neither"):
            razorkv.select_alibi(shape, slopes)
        with self.assertRaisesRegex(razorkv.Error, r"ratio \(-0.5\) must be in \[0, 1\]"):
            razorkv.select_alibi(shape, slopes, ratio=-0.5)
        with self.assertRaisesRegex(razorkv.Error, r"ratio \(1.5\) must be in \[0, 1\]"):
            razorkv.select_alibi(shape, slopes, ratio=1.5)
        with self.assertRaisesRegex(razorkv.Error, r"ratio \(nan\) must be in \[0, 1\]"):
            razorkv.select_alibi(shape, slopes, ratio=float("nan"))
        with self.assertRaisesRegex(razorkv.Error, r"seq_len \(-3\) must be > 0"):
            razorkv.select_alibi(shape, slopes, seq_len=-3)
        with self.assertRaisesRegex(razorkv.Error, "4 slopes for 8 query heads"):
            razorkv.select_alibi(shape, slopes[:4], seq_len=100)
        with self.assertRaisesRegex(razorkv.Error, r"slope \(0\) must be > 0"):
            razorkv.alibi_span(0.0, 1.0)
        with self.assertRaisesRegex(razorkv.Error, r"tokens \(0\) must be > 0"):
            razorkv.HeadPlan(shape).set_buffer_override(0, 1, 0)

class RazorCache(unittest.TestCase):
    def setUp(self):
        self.plan = razorkv.HeadPlan((2, 4, 2, 16))
        self.plan.set_retrieval(0, 1)
        self.config = razorkv.RazorConfig(sinks=2, s0=8, c=4.0)
        self.n = 64
        self.keys = [rng.standard_normal((self.n, 2, 16)).astype(np.float32) for _ in range(2)]
        self.values = [rng.standard_normal((self.n, 2, 16)).astype(np.float32) for _ in range(2)]

    def test_quantised_rows_decode_close_to_float_rows_in_fewer_bytes(self):
        plan = razorkv.HeadPlan((1, 4, 2, 64))
        plan.set_retrieval(0, 1)
        keys = rng.standard_normal((300, 2, 64)).astype(np.float32)
        values = rng.standard_normal((300, 2, 64)).astype(np.float32)
        q = rng.standard_normal((4, 64)).astype(np.float32)
        got = {}
        for storage, rotate, retrieval in ((None, False, None), ("q8", False, None),
                                           ("q4", True, None), ("q4", True, "q8")):
            config = razorkv.RazorConfig(sinks=4, fixed_window=64, storage=storage,
                                         rotate_keys=rotate, retrieval_storage=retrieval)
            self.assertEqual((config.storage, config.rotate_keys), (storage, rotate))
            self.assertEqual(config.retrieval_storage, retrieval or storage)
            cache = razorkv.RazorCache(plan, "float32", config)
            cache.compress_layer(0, keys, values)
            got[(storage, retrieval)] = (cache.decode(0, q), cache.kv_bytes())
            # The calculator counts what the cache holds (the window of 64 tokens in blocks).
            self.assertEqual(cache.kv_bytes(), razorkv.compressed_kv_bytes(
                plan, 300, sinks=4, s0=64, c=1e9, dtype_bytes=4, storage=storage,
                retrieval_storage=retrieval))
            # A state holds the blocks as they are: the restored cache decodes bit for bit.
            restored = razorkv.RazorCache.restore_state(cache.save_state())
            np.testing.assert_array_equal(restored.decode(0, q), got[(storage, retrieval)][0])
        exact, float_bytes = got[(None, None)]
        # Each stored value within half a step of its block (a step: the largest magnitude of 32
        # normal values / 127 or / 8): the outputs follow within a few steps' worth.
        for key, tolerance in (((("q8", None)), 0.05), ((("q4", None)), 0.4),
                               ((("q4", "q8")), 0.4)):
            out, kv_bytes = got[key]
            np.testing.assert_allclose(out, exact, atol=tolerance, err_msg=str(key))
            self.assertLess(kv_bytes, float_bytes)
        self.assertLess(got[("q4", None)][1], got[("q4", "q8")][1])
        self.assertLess(got[("q4", "q8")][1], got[("q8", None)][1])
        with self.assertRaisesRegex(razorkv.Error, "storage \\('q5'\\) must be one of 'q8', 'q4'"):
            razorkv.RazorConfig(storage="q5")
        with self.assertRaisesRegex(razorkv.Error, "head_dim \\(16\\) a multiple of 32"):
            razorkv.RazorCache(self.plan, "float32", razorkv.RazorConfig(storage="q8"))

    def test_threads_sharing_a_cache_never_crash_and_never_both_compress_a_layer(self):
        # Caches large enough that a decode or a compression takes milliseconds with the GIL
        # released, and that their blocks are mapped pages a release gives back to the system:
        # a release beside a decode read unmapped memory (a segfault), and two compressions of
        # one layer both "succeeded".
        import threading
        plan = razorkv.HeadPlan((1, 8, 4, 64))
        plan.set_retrieval(0, 1)
        keys = rng.standard_normal((16384, 4, 64)).astype(np.float32)
        values = rng.standard_normal((16384, 4, 64)).astype(np.float32)
        q = rng.standard_normal((8, 64)).astype(np.float32)
        cache = razorkv.RazorCache(plan, "float32", razorkv.RazorConfig(s0=8192, c=2.0))
        start = threading.Barrier(3)
        outcomes = []

        def decode_many():
            start.wait()
            for _ in range(100):
                try:
                    cache.decode(0, q)
                    outcomes.append("decoded")
                except razorkv.Error:
                    outcomes.append("error")

        def compress_release_clear():
            start.wait()
            for _ in range(20):
                try:
                    cache.compress_layer(0, keys, values)
                except razorkv.Error:
                    pass
                cache.release()
                cache.clear()

        threads = [threading.Thread(target=decode_many) for _ in range(2)]
        threads.append(threading.Thread(target=compress_release_clear))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(outcomes), 200)

        for _ in range(5):
            cache = razorkv.RazorCache(plan, "float32", razorkv.RazorConfig(s0=8192, c=2.0))
            both = threading.Barrier(2)
            results = []

            def compress():
                both.wait()
                try:
                    cache.compress_layer(0, keys, values)
                    results.append("ok")
                except razorkv.Error as e:
                    results.append(str(e))

            pair = [threading.Thread(target=compress) for _ in range(2)]
            for t in pair:
                t.start()
            for t in pair:
                t.join()
            self.assertEqual(results.count("ok"), 1, results)

    def test_byte_swapped_arrays_are_an_error_not_other_numbers(self):
        cache = razorkv.RazorCache(self.plan, "float32", self.config)
        swapped = self.keys[0].astype(">f4")
        with self.assertRaisesRegex(razorkv.Error, "dtype >f4 is big-endian, not this machine's"):
            cache.compress_layer(0, swapped, self.values[0])
        with self.assertRaisesRegex(razorkv.Error, "big-endian"):
            razorkv.score_queries_keys(razorkv.Probe(period=4, repeats=2, vocab_max=100),
                                       np.zeros((8, 2, 16), ">f4"), np.zeros((8, 2, 16), ">f4"))
        cache.compress_layer(0, swapped.astype(swapped.dtype.newbyteorder("=")), self.values[0])
        self.assertEqual(cache.num_tokens(0), self.n)

    def test_decode_is_full_attention_on_retrieval_heads_and_the_razor_rule_elsewhere(self):
        cache = razorkv.RazorCache(self.plan, "float32", self.config)
        for layer in range(2):
            cache.compress_layer(layer, self.keys[layer], self.values[layer])
        window = max(8, self.n // 4)
        self.assertEqual(cache.window(0, 0), window)
        self.assertEqual(cache.entries(0, 1), self.n)
        self.assertEqual(cache.entries(0, 0), 2 + 1 + window)
        q = rng.standard_normal((4, 16)).astype(np.float32)
        out = cache.decode(0, q)
        for h in range(4):
            kv = h // 2
            k, v = self.keys[0][:, kv, :], self.values[0][:, kv, :]
            expected = softmax_attention(q[h], k, v) if kv == 1 else razor_reference(
                q[h], k, v, 2, window)
            np.testing.assert_allclose(out[h], expected, rtol=2e-5, atol=2e-6)

    def test_append_then_decode_reads_the_new_token(self):
        cache = razorkv.RazorCache(self.plan, "float32", self.config)
        for layer in range(2):
            cache.compress_layer(layer, self.keys[layer], self.values[layer])
        k = np.zeros((1, 2, 16), np.float32)
        k[0, :, 0] = 12.0
        v = rng.standard_normal((1, 2, 16)).astype(np.float32)
        cache.append(1, k, v)
        self.assertEqual(cache.num_tokens(1), self.n + 1)
        q = np.zeros((4, 16), np.float32)
        q[:, 0] = 12.0  # logit 36 on the new key, about 12 at most on any other

        out = cache.decode(1, q)
        np.testing.assert_allclose(out, v[0, np.arange(4) // 2, :], atol=1e-3)

    def test_decode_checks_for_nan_unless_told_not_to(self):
        cache = razorkv.RazorCache(self.plan, "float32", self.config)
        for layer in range(2):
            cache.compress_layer(layer, self.keys[layer], self.values[layer])
        q = rng.standard_normal((4, 16)).astype(np.float32)
        bad_q = q.copy()
        bad_q[2, 5] = np.nan
        with self.assertRaisesRegex(razorkv.Error, "not finite"):
            cache.decode(0, bad_q)
        with self.assertRaisesRegex(razorkv.Error, "not finite"):
            cache.prefill(0, bad_q[None])
        self.assertTrue(np.isnan(cache.decode(0, bad_q, check_finite=False)[2]).all())
        k = self.keys[1][:1].copy()
        k[0, 1, 3] = np.inf
        # Python's RazorConfig checks what it is handed by default (C++'s does when asked).
        self.assertTrue(self.config.check_finite)
        with self.assertRaisesRegex(razorkv.Error, "key \\(inf\\) of token 64 in layer 1 kv head 1 "
                                    "dim 3 is not finite"):
            cache.append(1, k, self.values[1][:1])
        self.assertEqual(cache.num_tokens(1), self.n)
        unchecked = razorkv.RazorCache(self.plan, "float32", razorkv.RazorConfig(
            sinks=2, s0=8, c=4.0, check_finite=False))
        for layer in range(2):
            unchecked.compress_layer(layer, self.keys[layer], self.values[layer])
        unchecked.append(1, k, self.values[1][:1])  # the cache now holds it: decode says so
        with self.assertRaisesRegex(razorkv.Error, "not finite"):
            unchecked.decode(1, q)
        self.assertTrue(np.isfinite(unchecked.decode(0, q)).all())

    def test_chunked_prefill_holds_what_one_shot_compression_holds(self):
        whole = razorkv.RazorCache(self.plan, "float32", self.config)
        chunked = razorkv.RazorCache(self.plan, "float32", self.config)
        for layer in range(2):
            whole.compress_layer(layer, self.keys[layer], self.values[layer])
            for start in range(0, self.n, 16):
                chunked.compress_chunk(layer, self.keys[layer][start:start + 16],
                                       self.values[layer][start:start + 16])
        self.assertEqual(chunked.kv_bytes(), whole.kv_bytes())
        q = rng.standard_normal((4, 16)).astype(np.float32)
        np.testing.assert_allclose(chunked.decode(1, q), whole.decode(1, q), rtol=1e-5, atol=1e-6)
        queries = rng.standard_normal((3, 4, 16)).astype(np.float32)
        self.assertEqual(chunked.prefill(0, queries).shape, (3, 4, 16))

    def test_bytes_and_state_round_trip(self):
        cache = razorkv.RazorCache(self.plan, "float16", self.config)
        for layer in range(2):
            cache.compress_layer(layer, self.keys[layer].astype(np.float16),
                                 self.values[layer].astype(np.float16))
        self.assertEqual(cache.dtype, "float16")
        self.assertLess(cache.kv_bytes(), cache.dense_kv_bytes())
        self.assertAlmostEqual(cache.compression_ratio(), cache.kv_bytes() / cache.dense_kv_bytes())
        self.assertGreater(cache.dropped_tokens(), 0)
        with self.assertRaisesRegex(razorkv.Error, "dtype is a RazorConfig; pass it as config="):
            razorkv.RazorCache(self.plan, self.config)
        # A numpy dtype or type names the dtype as its name does; anything else names itself.
        self.assertEqual(razorkv.RazorCache(self.plan, np.float16, self.config).dtype, "float16")
        self.assertEqual(razorkv.RazorCache(self.plan, np.dtype("float64")).dtype, "float64")
        with self.assertRaisesRegex(razorkv.Error, "RazorCache: dtype \\(dtype\\('int8'\\)\\) is not "
                                    "one razorkv stores: float32, float64, float16, bfloat16"):
            razorkv.RazorCache(self.plan, np.dtype("int8"))
        with self.assertRaisesRegex(razorkv.Error, "dtype must be one of .* got a float"):
            razorkv.RazorCache(self.plan, 3.5)
        with self.assertRaisesRegex(razorkv.Error, "config must be a RazorConfig or None, got a str"):
            razorkv.RazorCache(self.plan, "float32", "s0=256")
        whole = razorkv.RazorCache(self.plan, "float32")  # S0 = 4,000: this prompt is kept whole
        for layer in range(2):
            whole.compress_layer(layer, self.keys[layer], self.values[layer])
        self.assertEqual(whole.dropped_tokens(), 0)
        self.assertEqual(whole.compression_ratio(), 1.0)
        again = razorkv.RazorCache.restore_state(cache.save_state(), "float16")
        q = rng.standard_normal((4, 16)).astype(np.float32)
        np.testing.assert_array_equal(again.decode(0, q), cache.decode(0, q))
        # max_bytes bounds what the loader allocates; by default a small state gets 64 MiB more
        # than 8 times its size, so a state whose ring capacity was raised by 2^28 rows (the
        # first head's fourth i64 after the 157-byte header, the plan and the layer's 17 bytes)
        # is an error, not gigabytes.
        state = cache.save_state()
        with self.assertRaisesRegex(razorkv.Error, "config.growth_rows \\(256\\) outside \\[1, 1\\]"):
            razorkv.RazorCache.restore_state(state, "float16", max_bytes=100)  # not one block
        at = 8 + 4 + 4 + 32 + 4 + 57 + 2 * 9 * 2 + 17 + 3 * 8 + 3
        roomy = bytearray(state)
        roomy[at] = 0x10
        with self.assertRaisesRegex(razorkv.Error, "a head's ring would bring the restored cache"):
            razorkv.RazorCache.restore_state(bytes(roomy), "float16")

    def test_errors_leave_the_cache_as_it_was(self):
        cache = razorkv.RazorCache(self.plan, "float32", self.config)
        cache.compress_layer(0, self.keys[0], self.values[0])
        before = cache.kv_bytes()
        with self.assertRaisesRegex(razorkv.Error, "compress_layer: keys has dtype float16, "
                                    "expected float32 \\(the cache's dtype\\)"):
            cache.compress_layer(1, self.keys[1].astype(np.float16), self.values[1])
        with self.assertRaisesRegex(razorkv.Error, "append: values has dtype float64, expected "
                                    "float32"):
            cache.append(0, self.keys[0][:1], self.values[0][:1].astype(np.float64))
        with self.assertRaisesRegex(razorkv.Error, "layer"):
            cache.compress_layer(5, self.keys[1], self.values[1])
        with self.assertRaisesRegex(razorkv.Error, "compensation \\('mean'\\)"):
            razorkv.RazorConfig(compensation="mean")
        with self.assertRaisesRegex(razorkv.Error, "decode: queries must be \\[query heads, head_dim\\]"):
            cache.decode(0, np.zeros((1, 4, 16), np.float32))
        with self.assertRaisesRegex(razorkv.Error, "dtype \\('int8'\\)"):
            razorkv.RazorCache(self.plan, "int8")
        self.assertEqual(cache.kv_bytes(), before)


class Policies(unittest.TestCase):
    def test_every_baseline_compresses_and_decodes(self):
        layers, n = 2, 80
        keys = [rng.standard_normal((n, 2, 8)).astype(np.float32) for _ in range(layers)]
        values = [rng.standard_normal((n, 2, 8)).astype(np.float32) for _ in range(layers)]
        queries = [rng.standard_normal((n, 4, 8)).astype(np.float32) for _ in range(layers)]
        plan = razorkv.HeadPlan((layers, 4, 2, 8))
        q = rng.standard_normal((4, 8)).astype(np.float32)
        full = razorkv.compress(razorkv.Policy.full(), keys, values, budget_entries=n,
                                queries=queries)
        expected = [softmax_attention(q[h], keys[0][:, h // 2], values[0][:, h // 2])
                    for h in range(4)]
        np.testing.assert_allclose(full.decode(0, q), expected, rtol=2e-5, atol=2e-6)
        for policy in (razorkv.Policy.streaming_llm(), razorkv.Policy.snapkv(window=8),
                       razorkv.Policy.h2o(), razorkv.Policy.razor(plan)):
            cache = razorkv.compress(policy, keys, values, budget_entries=24, queries=queries)
            self.assertLessEqual(cache.entries(0, 0), 25, policy.name)
            out = cache.decode(0, q)
            self.assertTrue(np.all(np.isfinite(out)), policy.name)
            cache.append(0, keys[0][:1], values[0][:1])

    def test_a_policy_that_needs_queries_says_so(self):
        keys = [np.zeros((40, 2, 8), np.float32)]
        with self.assertRaisesRegex(razorkv.Error, "needs that many prompt queries"):
            razorkv.compress(razorkv.Policy.snapkv(window=8), keys, keys, budget_entries=16,
                             num_query_heads=4)


@unittest.skipUnless(razorkv.HugePageResource.maps_blocks, "this system maps no blocks itself")
class MemoryPools(unittest.TestCase):
    """Caches on a HugePageResource that keeps every freed block: what a cache frees shows up as
    kept bytes, so a cache whose memory came from the heap would leave none."""

    def setUp(self):
        self.plan = razorkv.HeadPlan((2, 4, 2, 16))
        self.plan.set_retrieval(0, 1)
        self.keys = [rng.standard_normal((64, 2, 16)).astype(np.float32) for _ in range(2)]
        self.values = [rng.standard_normal((64, 2, 16)).astype(np.float32) for _ in range(2)]
        self.q = rng.standard_normal((4, 16)).astype(np.float32)

    def pool(self):
        return razorkv.HugePageResource(min_bytes=64, keep_bytes=1 << 40)

    def test_a_razor_cache_and_its_restored_copy_take_their_memory_from_the_pool(self):
        config = razorkv.RazorConfig(sinks=2, s0=8, c=4.0)
        pool = self.pool()
        pooled = razorkv.RazorCache(self.plan, "float32", config, resource=pool)
        heap = razorkv.RazorCache(self.plan, "float32", config)
        for layer in range(2):
            pooled.compress_layer(layer, self.keys[layer], self.values[layer])
            heap.compress_layer(layer, self.keys[layer], self.values[layer])
        np.testing.assert_array_equal(pooled.decode(0, self.q), heap.decode(0, self.q))
        self.assertEqual(pool.kept_bytes(), 0)
        pooled.release()
        released = pool.kept_bytes()
        self.assertGreater(released, 0)
        restored = razorkv.RazorCache.restore_state(heap.save_state(), "float32", resource=pool)
        self.assertLess(pool.kept_bytes(), released)  # the restored rows reuse the kept blocks
        np.testing.assert_array_equal(restored.decode(1, self.q), heap.decode(1, self.q))
        # A cache keeps its resource alive, and lets it go when it goes.
        def compress(resource):
            cache = razorkv.RazorCache(self.plan, "float32", config, resource=resource)
            cache.compress_layer(0, self.keys[0], self.values[0])
            return cache
        self.assert_holds_its_resource(compress, self.keys[0], self.values[0])
        state = heap.save_state()
        self.assert_holds_its_resource(
            lambda resource: razorkv.RazorCache.restore_state(state, "float32", resource=resource),
            self.keys[0], self.values[0])

    def assert_holds_its_resource(self, make_cache, keys, values):
        """make_cache(resource) gives a cache of a compressed layer 0; with no other reference
        to the resource left, the cache still appends and decodes, and the resource goes with
        the cache."""
        pool = self.pool()
        cache = make_cache(pool)
        alive = weakref.ref(pool)
        del pool
        gc.collect()
        self.assertIsNotNone(alive())
        for t in range(1, 40):  # past the windows' rows: blocks from the resource
            cache.append(0, keys[t:t + 1], values[t:t + 1])
        self.assertTrue(np.all(np.isfinite(cache.decode(0, self.q))))
        del cache
        gc.collect()
        self.assertIsNone(alive())

    def test_every_policys_cache_takes_its_memory_from_the_pool(self):
        queries = [rng.standard_normal((64, 4, 16)).astype(np.float32) for _ in range(2)]
        for policy in (razorkv.Policy.full(), razorkv.Policy.streaming_llm(),
                       razorkv.Policy.snapkv(window=8), razorkv.Policy.h2o(),
                       razorkv.Policy.razor(self.plan)):
            pool = self.pool()
            pooled = razorkv.compress(policy, self.keys, self.values, budget_entries=24,
                                      queries=queries, resource=pool)
            heap = razorkv.compress(policy, self.keys, self.values, budget_entries=24,
                                    queries=queries)
            np.testing.assert_array_equal(pooled.decode(1, self.q), heap.decode(1, self.q),
                                          policy.name)
            self.assertEqual(pool.kept_bytes(), 0, policy.name)
            del pooled
            self.assertGreater(pool.kept_bytes(), 0, policy.name)
            self.assert_holds_its_resource(
                lambda resource: razorkv.compress(policy, self.keys, self.values,
                                                  budget_entries=24, queries=queries,
                                                  resource=resource),
                self.keys[1], self.values[1])

    def test_bad_input_names_the_value(self):
        with self.assertRaisesRegex(razorkv.Error, "min_bytes \\(0\\) must be > 0"):
            razorkv.HugePageResource(min_bytes=0)
        with self.assertRaisesRegex(razorkv.Error, "keep_bytes \\(-1\\) must be >= 0"):
            razorkv.HugePageResource(keep_bytes=-1)
        with self.assertRaises(TypeError):
            razorkv.RazorCache(self.plan, "float32", resource="pool")


class PagedPools(unittest.TestCase):
    """An engine's page pools read in place: the sequence's pages out of order among pages of
    loud noise (values near 100), which any read of the wrong page or past the sequence's last
    token would show."""

    layers, kv_heads, dim, page_size, n, pages = 2, 2, 16, 8, 37, 10

    def setUp(self):
        shape = (self.n, self.kv_heads, self.dim)
        self.keys = [rng.standard_normal(shape).astype(np.float32) for _ in range(self.layers)]
        self.values = [rng.standard_normal(shape).astype(np.float32) for _ in range(self.layers)]
        self.table = np.array([6, 2, 9, 0, 4], np.int32)  # ceil(37 / 8) pages, in no order
        self.plan = razorkv.HeadPlan((self.layers, 4, self.kv_heads, self.dim))
        self.plan.set_retrieval(0, 1)
        self.config = razorkv.RazorConfig(sinks=2, s0=8, c=4.0)

    def pool(self, rows, layout="nhd", dtype=np.float32):
        """One layer's pool holding `rows` [n, kv heads, dim] at the table's pages."""
        pool = 100 + rng.standard_normal((self.pages, self.page_size, self.kv_heads, self.dim))
        for i, page in enumerate(self.table):
            chunk = rows[i * self.page_size:(i + 1) * self.page_size]
            pool[page, :len(chunk)] = chunk
        pool = pool.astype(dtype)
        return np.ascontiguousarray(pool.transpose(0, 2, 1, 3)) if layout == "hnd" else pool

    def paged(self, layout="nhd", dtype=np.float32):
        return razorkv.PagedKV([self.pool(k, layout, dtype) for k in self.keys],
                               [self.pool(v, layout, dtype) for v in self.values], self.table,
                               self.n, layout=layout)

    def test_decode_and_prefill_read_the_sequence_in_its_pages(self):
        full = razorkv.compress(razorkv.Policy.full(), self.keys, self.values,
                                budget_entries=self.n, num_query_heads=4)
        q = rng.standard_normal((4, self.dim)).astype(np.float32)
        chunk = rng.standard_normal((5, 4, self.dim)).astype(np.float32)
        for layout in ("nhd", "hnd"):
            paged = self.paged(layout)
            self.assertEqual((paged.shape, paged.dtype, paged.num_tokens, paged.page_size),
                             ((2, 2, 16), "float32", self.n, self.page_size))
            for layer in range(self.layers):
                expected = [softmax_attention(q[h], self.keys[layer][:, h // 2],
                                              self.values[layer][:, h // 2]) for h in range(4)]
                np.testing.assert_allclose(paged.decode(layer, q), expected, rtol=2e-5,
                                           atol=2e-6, err_msg=layout)
                np.testing.assert_allclose(paged.prefill(layer, chunk), full.prefill(layer, chunk),
                                           rtol=2e-5, atol=2e-6, err_msg=layout)

    def test_a_razor_cache_compressed_from_pages_is_the_one_from_arrays_bit_for_bit(self):
        for dtype, name in ((np.float32, "float32"), (np.float16, "float16")):
            from_arrays = razorkv.RazorCache(self.plan, name, self.config)
            for layout in ("nhd", "hnd"):
                paged = self.paged(layout, dtype)
                from_pages = razorkv.RazorCache(self.plan, name, self.config)
                for layer in range(self.layers):
                    if layout == "nhd":
                        from_arrays.compress_layer(layer, self.keys[layer].astype(dtype),
                                                   self.values[layer].astype(dtype))
                    from_pages.compress_layer(layer, paged)
                self.assertEqual(from_pages.save_state(), from_arrays.save_state(), (name, layout))

    def test_one_kv_tensor_is_read_in_place_as_it_is_at_each_call(self):
        # K and V of a layer in one [2, pages, page_size, kv heads, dim] tensor, as vLLM keeps
        # them: each pool is a strided slice of it.
        kv = np.stack([self.pool(self.keys[0]), self.pool(self.values[0])])
        paged = razorkv.PagedKV([kv[0]], [kv[1]], self.table, self.n)
        q = rng.standard_normal((4, self.dim)).astype(np.float32)
        before = paged.decode(0, q)
        kv[1, self.table[0], 0] += 1.0  # token 0's values, written by the engine after the view
        values = self.values[0].copy()
        values[0] += 1.0
        expected = [softmax_attention(q[h], self.keys[0][:, h // 2], values[:, h // 2])
                    for h in range(4)]
        after = paged.decode(0, q)
        self.assertGreater(np.abs(after - before).max(), 1e-3)
        np.testing.assert_allclose(after, expected, rtol=2e-5, atol=2e-6)

    def test_the_view_keeps_its_arrays_alive(self):
        keys = [self.pool(k) for k in self.keys]
        values = [self.pool(v) for v in self.values]
        watched = [weakref.ref(keys[0]), weakref.ref(values[1])]
        paged = razorkv.PagedKV(keys, values, list(self.table), self.n)  # the table is copied
        del keys, values
        gc.collect()
        self.assertTrue(all(ref() is not None for ref in watched))
        q = rng.standard_normal((4, self.dim)).astype(np.float32)
        expected = [softmax_attention(q[h], self.keys[1][:, h // 2], self.values[1][:, h // 2])
                    for h in range(4)]
        np.testing.assert_allclose(paged.decode(1, q), expected, rtol=2e-5, atol=2e-6)
        del paged
        gc.collect()
        self.assertTrue(all(ref() is None for ref in watched))

    def test_bad_input_names_the_value(self):
        keys = [self.pool(k) for k in self.keys]
        values = [self.pool(v) for v in self.values]

        def paged(table=self.table, n=self.n, k=keys, v=values, layout="nhd"):
            return razorkv.PagedKV(k, v, table, n, layout=layout)

        cases = [
            ({"table": [6, 2, 9, 0, 10]}, r"page_table\[4\] \(10\) outside \[0, 10\)"),
            ({"table": [6, 2**40, 9, 0, 4]},
             r"page_table\[1\] \(1099511627776\) is not a page index"),
            ({"table": [6, -1, 9, 0, 4]}, r"page_table\[1\] \(-1\) is not a page index"),
            ({"table": np.zeros(5)}, r"page_table must hold integers, holds float64"),
            ({"n": 45}, r"table_pages \(5\) != the 6 pages of 8 tokens that num_tokens \(45\)"),
            ({"layout": "nchw"}, r"layout \('nchw'\) must be 'nhd' or 'hnd'"),
            ({"k": [keys[0][0], keys[1]]}, r"key_pools\[0\] must have 4 dimensions"),
            ({"k": [keys[0], keys[1][..., ::2]]},
             r"key_pools\[1\]: the last axis \(head_dim\) must be contiguous, has stride 2"),
            ({"v": [values[0].astype(np.float16), values[1]]},
             r"value_pools\[0\] is float16, key_pools\[0\] float32"),
            ({"v": values[:1]}, r"2 key pools and 1 value pools"),
            ({"v": [values[0][:, :4], values[1]]},
             r"value_pools\[0\] has pages of 4 tokens x 2 kv heads x 16"),
        ]
        for arguments, message in cases:
            with self.assertRaisesRegex(razorkv.Error, message):
                paged(**arguments)
        view = paged()
        with self.assertRaisesRegex(razorkv.Error, "layer"):
            view.decode(2, np.zeros((4, self.dim), np.float32))
        cache = razorkv.RazorCache(self.plan, "float16", self.config)
        with self.assertRaisesRegex(razorkv.Error,
                                    "the pages hold float32, this cache stores float16"):
            cache.compress_layer(0, view)
        with self.assertRaisesRegex(razorkv.Error, "a PagedKV holds the values too"):
            cache.compress_layer(0, view, values[0])
        with self.assertRaisesRegex(razorkv.Error, "values are missing"):
            cache.compress_layer(0, self.keys[0].astype(np.float16))
        self.assertEqual(cache.kv_bytes(), 0)

    @unittest.skipIf(torch is None, "PyTorch is not installed")
    def test_bfloat16_tensor_pools_are_read_in_place(self):
        kv = torch.from_numpy(np.stack([self.pool(self.keys[0]), self.pool(self.values[0])]))
        kv = kv.to(torch.bfloat16)
        plan = razorkv.HeadPlan((1, 4, self.kv_heads, self.dim))
        from_pages = razorkv.RazorCache(plan, "bfloat16", self.config)
        from_pages.compress_layer(0, razorkv.PagedKV([kv[0]], [kv[1]],
                                                     torch.from_numpy(self.table), self.n))
        from_arrays = razorkv.RazorCache(plan, "bfloat16", self.config)
        gathered = [torch.cat([kv[i, p] for p in self.table])[:self.n] for i in range(2)]
        from_arrays.compress_layer(0, gathered[0], gathered[1])
        self.assertEqual(from_pages.save_state(), from_arrays.save_state())


@unittest.skipIf(torch is None, "PyTorch is not installed")
class TorchTensors(unittest.TestCase):
    def test_tensors_are_read_in_place_and_results_come_back_as_tensors(self):
        plan = razorkv.HeadPlan((1, 2, 2, 16))
        keys = torch.randn(2, 50, 16)  # head-major: read through strides, no copy
        values = torch.randn(2, 50, 16)
        for dtype in ("float32", "bfloat16", "float16"):
            t = getattr(torch, dtype)
            cache = razorkv.RazorCache(plan, dtype, razorkv.RazorConfig(s0=8, c=4.0))
            cache.compress_layer(0, keys.to(t).transpose(0, 1), values.to(t).transpose(0, 1))
            q = torch.randn(2, 16)
            out = cache.decode(0, q)
            self.assertIsInstance(out, torch.Tensor)
            self.assertEqual(tuple(out.shape), (2, 16))

    def test_a_tensor_off_the_cpu_or_of_another_dtype_is_an_error(self):
        plan = razorkv.HeadPlan((1, 2, 2, 16))
        cache = razorkv.RazorCache(plan, "bfloat16")
        with self.assertRaisesRegex(razorkv.Error, "keys has dtype float32, expected bfloat16"):
            cache.compress_layer(0, torch.zeros(8, 2, 16), torch.zeros(8, 2, 16))
        # torch's dtypes name a cache's dtype as the names do.
        self.assertEqual(razorkv.RazorCache(plan, torch.bfloat16).dtype, "bfloat16")
        self.assertEqual(razorkv.RazorCache(plan, dtype=torch.float32).dtype, "float32")
        with self.assertRaisesRegex(razorkv.Error, "dtype \\(torch.int8\\) is not one razorkv "
                                    "stores"):
            razorkv.RazorCache(plan, torch.int8)
        # A "meta" tensor (shape without memory) stands in for a GPU one: no CPU memory to read.
        off_cpu = torch.zeros(8, 2, 16, dtype=torch.bfloat16, device="meta")
        with self.assertRaisesRegex(razorkv.Error, "keys: a meta tensor; razorkv reads CPU memory"):
            cache.compress_layer(0, off_cpu, off_cpu)


if __name__ == "__main__":
    unittest.main()
