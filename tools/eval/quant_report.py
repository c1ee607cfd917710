"""The KV-quantisation table: razor and the full cache with rows of float, 8-bit and 4-bit rows
(razorkv_smollm2_eval --quant), beside llama.cpp's q8_0 and q4_0 caches on the same prompts.

    python3 tools/eval/quant_report.py QUANT_RUN_DIR... [--beside LLAMA_CPP_RUN_DIR...]

Bytes are against a 16-bit full cache, the cache llama.cpp and most engines keep. razorkv's
engine stores float: a cache of rows of T counts as the 16-bit cache it would be (its fraction of
the float full cache), a quantised one by its bytes against half the float full cache (its sinks
and compensation tokens, kept as T, count as the float they are here, a slight overcount).
Accuracy is on the prompts of the quantised run whose (task, length) cell the full cache of that
run solves (report.py's cut), each prompt scored whole; llama.cpp's rows are kept for those very
prompts. KL is from each engine's own full cache, nats per scored token.
"""
import collections
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402  (the loader and the intervals the other tables use)


def main() -> None:
    args = sys.argv[1:]
    split = args.index("--beside") if "--beside" in args else len(args)
    quant_dirs, others = args[:split], args[split + 1:]
    ours, ours_likelihood = report.load(quant_dirs)
    theirs, theirs_likelihood = report.load(others)
    prompts = {report.prompt_key(r) for r in ours}
    rows = ours + [r for r in theirs
                   if r["source"] == "llama.cpp" and report.prompt_key(r) in prompts]

    full = collections.defaultdict(list)
    for r in ours:
        if r["policy"] == "full":
            full[report.cell_key(r)].append(int(r["correct"]))
    solved = {c for c, v in full.items() if sum(v) / len(v) >= report.CUT}

    score = collections.defaultdict(lambda: [0, 0])
    every = collections.defaultdict(lambda: [0, 0])
    f16 = collections.defaultdict(list)
    for r in rows:
        p = r["policy"]
        every[p][0] += int(r["correct"])
        every[p][1] += 1
        if report.cell_key(r) in solved:
            score[p][0] += int(r["correct"])
            score[p][1] += 1
        # razorkv's fractions are of its float full cache, twice a 16-bit one: a cache of rows
        # of T is counted as the 16-bit cache it would be, a quantised one by its bytes.
        quantised = r["source"] == "razorkv" and (" q8" in p or " q4" in p)
        f16[p].append(r["fraction"] * (2 if quantised else 1))

    lengths = sorted({int(r["length"]) for r in ours_likelihood})
    likelihood = [r for r in ours_likelihood] + [
        r for r in theirs_likelihood if r["policy"].startswith("llama.cpp")
        and int(r["length"]) in lengths]
    agg = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for r in likelihood:
        a = agg[(r["policy"], int(r["length"]))]
        a[0] += float(r["nll"])
        a[1] += float(r["kl"])
        a[2] += int(r["scored"])

    cells = ", ".join(f"{v} at {n:,}" for v, n in sorted(solved, key=lambda c: (c[1], c[0])))
    print(f"Accuracy on the prompts of the cells the full cache solves ({cells}).\n")
    print("| cache | KV bytes / 16-bit full | accuracy, % [95% interval] | all prompts | "
          + " | ".join(f"ppl / KL at {n:,}" for n in lengths) + " |")
    print("|---|--:|--:|--:|" + "--:|" * len(lengths))
    for p in dict.fromkeys(r["policy"] for r in rows):
        ratio = sum(f16[p]) / len(f16[p])
        ll = []
        for n in lengths:
            nll, kl, scored = agg[(p, n)]
            ll.append(f"{math.exp(nll / scored):.2f} / {kl / scored:.4f}" if scored else "-")
        print(f"| {p} | {ratio:.3f} (1/{1 / ratio:.1f}) | {report.percent(*score[p])} | "
              f"{every[p][0]}/{every[p][1]} | " + " | ".join(ll) + " |")


if __name__ == "__main__":
    main()
