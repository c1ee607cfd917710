"""Tables and figures of the long-context evaluation from the CSV files it wrote.

    python3 report.py OUT_DIR [RUN_DIR ...]
    python3 report.py --merge OUT_DIR RUN_DIR ...

Each RUN_DIR holds any of: a razorkv_smollm2_eval run (results.csv, likelihood.csv), llama_cpp.csv
(tools/eval/llama_cpp_kv.py), kvpress*.csv (tools/eval/kvpress_eval.py). --merge gathers them
into OUT_DIR's results.csv, likelihood.csv, llama_cpp.csv and kvpress.csv, each prompt and cache
once. The report prints the markdown tables of docs/real_model.md and writes OUT_DIR/needles.svg
(single-needle recall by depth and length, one panel per cache) and OUT_DIR/policies.svg
(accuracy on the tasks the full cache solves against KV bytes: a line per policy over the
budgets it ran at, llama.cpp's and kvpress's caches as points). Python's standard library only.

The headline keeps the (task, length) cells where the full cache answers at least CUT of the
prompts: a policy cannot be blamed for what the model cannot do. The rest is reported apart.
Every table but the budget sweep's is at razorkv's default budget, a third of the full cache.
"""
import collections
import csv
import math
import sys
from pathlib import Path

CUT = 0.8
DEFAULT_BUDGET = 1.0 / 3.0
HEATMAP = ["full", "razor", "razor random groups", "streaming_llm", "snapkv", "h2o",
           "snapkv (question in the prompt)", "llama.cpp q4_0", "kvpress expected_attention",
           "kvpress kvzip"]
# The policies drawn as lines over the budgets of the sweep.
SWEPT = ["razor", "razor random groups", "razor no echo heads",
         "streaming_llm", "snapkv", "h2o"]
# razorkv's caches beside kvpress's implementation of the same method, and the two engines.
CROSS_CHECKS = [("full", "kvpress full"), ("streaming_llm", "kvpress streaming_llm"),
                ("snapkv", "kvpress snapkv")]


def wilson(k: int, n: int) -> tuple:
    if n == 0:
        return (0.0, 1.0)
    z = 1.959964
    p, z2n = k / n, z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z * math.sqrt(p * (1 - p) / n + z2n / (4 * n)) / (1 + z2n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def variant(row: dict) -> str:
    return row["task"] if row["task"] != "single" else f"single {row['needle']}"


def kvpress_files(d: Path) -> list:
    return sorted(d.glob("kvpress*.csv"))


def load(run_dirs: list) -> tuple:
    """Every answer row (each prompt and cache once) and every likelihood row of the runs."""
    rows, likelihood, seen = [], [], set()

    def add(r: dict) -> None:
        key = prompt_key(r) + (r["policy"], r["budget"])
        if key not in seen:
            seen.add(key)
            rows.append(r)

    for d in map(Path, run_dirs):
        if (d / "results.csv").exists():
            with open(d / "results.csv", encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    if r["query_aware"] == "1":
                        r["policy"] += " (question in the prompt)"
                    r["fraction"] = int(r["kv_bytes"]) / int(r["full_bytes"])
                    r["budget"] = round(float(r.get("budget") or DEFAULT_BUDGET), 3)
                    r["source"] = "razorkv"
                    add(r)
        if (d / "llama_cpp.csv").exists():
            with open(d / "llama_cpp.csv", encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    r["policy"] = r.pop("cache")
                    r["fraction"] = float(r["kv_fraction"])
                    r["budget"] = None  # its own bytes, set by the cache type
                    r["source"] = "llama.cpp"
                    add(r)
        for path in kvpress_files(d):
            with open(path, encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    stored, read = float(r["kv_fraction"]), float(r["attended_fraction"])
                    r["policy"] = r.pop("press")
                    if read < stored:  # KVzip and DuoAttention mask what they drop
                        r["policy"] += " (masks, stores all)"
                    r["fraction"] = stored
                    r["read"] = read
                    r["budget"] = round(DEFAULT_BUDGET, 3)
                    r["source"] = "kvpress"
                    add(r)
        if (d / "likelihood.csv").exists():
            with open(d / "likelihood.csv", encoding="utf-8") as f:
                likelihood += list(csv.DictReader(f))
    return rows, likelihood


def at_default(r: dict) -> bool:
    return r["budget"] is None or r["budget"] == round(DEFAULT_BUDGET, 3)


def cell_key(r: dict) -> tuple:
    return (variant(r), int(r["length"]))


def prompt_key(r: dict) -> tuple:
    return (r["task"], r["needle"], int(r["length"]), r["depth"], r["rep"])


def percent(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]" if n else "-"


def merge(out_dir: Path, run_dirs: list) -> None:
    """One CSV of each kind from the runs: each prompt and cache once, the first run's row kept
    (a later run that repeats a cache on the same prompt, as a chunked-prefill run does, adds
    only what is new); the columns are the union of the runs' (a razorkv run before the budget
    column is at the default budget)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    kinds = {"results.csv": lambda d: [d / "results.csv"],
             "likelihood.csv": lambda d: [d / "likelihood.csv"],
             "llama_cpp.csv": lambda d: [d / "llama_cpp.csv"],
             "kvpress.csv": kvpress_files}
    for name, files in kinds.items():
        header, body, seen = [], [], set()
        for d in map(Path, run_dirs):
            for path in files(d):
                if not path.exists():
                    continue
                with open(path, newline="", encoding="utf-8") as f:
                    reader = csv.DictReader(f)
                    header += [c for c in reader.fieldnames if c not in header]
                    for r in reader:
                        if name == "results.csv" and not r.get("budget"):
                            r["budget"] = f"{DEFAULT_BUDGET:g}"
                        key = tuple(r.get(c, "") for c in ("length", "task", "needle", "depth",
                                                            "rep", "trial", "policy", "cache",
                                                            "press", "query_aware", "budget"))
                        if key not in seen:
                            seen.add(key)
                            body.append(r)
        if name == "results.csv" and header:
            if "budget" in header:
                header.remove("budget")
            header.insert(header.index("query_aware") + 1, "budget")
        if header:
            with open(out_dir / name, "w", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, header, lineterminator="\n")
                writer.writeheader()
                writer.writerows(body)


def main() -> None:
    if sys.argv[1] == "--merge":
        merge(Path(sys.argv[2]), sys.argv[3:])
        return
    out_dir, run_dirs = Path(sys.argv[1]), sys.argv[2:]
    every_row, likelihood = load(run_dirs)
    rows = [r for r in every_row if at_default(r)]
    lengths = sorted({int(r["length"]) for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))

    # The full cache decides which cells the headline keeps.
    full = collections.defaultdict(list)
    for r in rows:
        if r["policy"] == "full":
            full[cell_key(r)].append(int(r["correct"]))
    solved = {c for c, v in full.items() if sum(v) / len(v) >= CUT}
    variants = list(dict.fromkeys(c[0] for c in full))

    print(f"### The full cache, by task and length (whole answers; cells >= {CUT:.0%} are the "
          "headline's)\n")
    print("| task | " + " | ".join(f"{n:,}" for n in lengths) + " |")
    print("|---|" + "--:|" * len(lengths))
    for v in variants:
        cells = []
        for n in lengths:
            got = full.get((v, n), [])
            mark = "**" if (v, n) in solved else ""
            cells.append(f"{mark}{sum(got)}/{len(got)}{mark}" if got else "-")
        print(f"| {v} | " + " | ".join(cells) + " |")

    # Headline: accuracy on the solved cells, per policy and length, with 95% intervals.
    by = collections.defaultdict(lambda: [0, 0])
    frac = collections.defaultdict(list)
    for r in rows:
        if cell_key(r) in solved:
            for key in ((r["policy"], int(r["length"])), (r["policy"], "all")):
                by[key][0] += int(r["correct"])
                by[key][1] += 1
            frac[r["policy"]].append(r["fraction"])
    print(f"\n### Accuracy on the cells the full cache solves, % [95% interval]\n")
    print("| cache | KV bytes / full | " + " | ".join(f"{n:,}" for n in lengths) + " | all |")
    print("|---|--:|" + "--:|" * (len(lengths) + 1))
    for p in policies:
        if not frac[p]:
            continue
        cells = [percent(*by[(p, n)]) if by[(p, n)][1] else "-" for n in lengths]
        mean = sum(frac[p]) / len(frac[p])
        print(f"| {p} | {mean:.3f} | " + " | ".join(cells) + f" | {percent(*by[(p, 'all')])} |")

    # Per task, on the solved cells.
    print("\n### By task, on the cells the full cache solves (correct / prompts, all lengths)\n")
    solved_variants = [v for v in variants if any((v, n) in solved for n in lengths)]
    print("| cache | " + " | ".join(solved_variants) + " |")
    print("|---|" + "--:|" * len(solved_variants))
    per_task = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        if cell_key(r) in solved:
            per_task[(r["policy"], variant(r))][0] += int(r["correct"])
            per_task[(r["policy"], variant(r))][1] += 1
    for p in policies:
        if not frac[p]:
            continue
        cells = [f"{per_task[(p, v)][0]}/{per_task[(p, v)][1]}" if per_task[(p, v)][1] else "-"
                 for v in solved_variants]
        print(f"| {p} | " + " | ".join(cells) + " |")

    # The cells the full cache does not solve.
    unsolved = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        if cell_key(r) not in solved:
            unsolved[r["policy"]][0] += int(r["correct"])
            unsolved[r["policy"]][1] += 1
    if unsolved:
        print("\n### The other cells (the full cache below the cut), correct / prompts\n")
        print("| cache | correct |")
        print("|---|--:|")
        for p in policies:
            if unsolved[p][1]:
                print(f"| {p} | {unsolved[p][0]}/{unsolved[p][1]} |")

    # Perplexity and KL after a compressed prefix.
    if likelihood:
        agg = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0, 0.0])
        for r in likelihood:
            a = agg[(r["policy"], int(r["length"]))]
            a[0] += float(r["nll"])
            a[1] += float(r["kl"])
            a[2] += float(r["agree"])
            a[3] += int(r["scored"])
            a[4] = int(r["kv_bytes"]) / int(r["full_bytes"])
        ll_lengths = sorted({int(r["length"]) for r in likelihood})
        print("\n### Held-out perplexity / mean KL from the full cache (nats per token) / same top "
              "token as the full cache\n")
        print("| cache | KV bytes / full | " + " | ".join(f"{n:,}" for n in ll_lengths) + " |")
        print("|---|--:|" + "--:|" * len(ll_lengths))
        for p in dict.fromkeys(r["policy"] for r in likelihood):
            cells = []
            for n in ll_lengths:
                nll, kl, agree, scored, _ = agg[(p, n)]
                cells.append(f"{math.exp(nll / scored):.2f} / {kl / scored:.4f} / "
                             f"{100 * agree / scored:.0f}%" if scored else "-")
            fractions = sorted({f"{agg[(p, n)][4]:.3f}" for n in ll_lengths if agg[(p, n)][3]})
            bytes_cell = fractions[0] + (f"-{fractions[-1]}" if len(fractions) > 1 else "")
            print(f"| {p} | {bytes_cell} | " + " | ".join(cells) + " |")
        if any(p.startswith("llama.cpp") for (p, _) in agg):
            print("\nllama.cpp's rows: its own engine, KL and top token from its own f16 cache, "
                  "bytes against its f16 cache.")

    cross_check(rows)
    sweep = budget_sweep(every_row, solved)

    out_dir.mkdir(parents=True, exist_ok=True)
    write_heatmaps(out_dir / "needles.svg", rows, lengths)
    write_policies(out_dir / "policies.svg", rows, sweep, solved)


def cross_check(rows: list) -> None:
    """razorkv's caches against kvpress's implementation of the same method, prompt by prompt."""
    answers = {(prompt_key(r), r["policy"]): r for r in rows}
    lines = []
    for ours, theirs in CROSS_CHECKS:
        common = [k for (k, p) in answers if p == theirs and (k, ours) in answers]
        if not common:
            continue
        a = [answers[(k, ours)] for k in common]
        b = [answers[(k, theirs)] for k in common]
        same_score = sum(x["correct"] == y["correct"] for x, y in zip(a, b))
        same_text = sum(x["generated"].strip() == y["generated"].strip() for x, y in zip(a, b))
        lines.append(f"| {ours} | {theirs} | {len(common)} | {same_score} | {same_text} | "
                     f"{sum(int(x['correct']) for x in a)} | {sum(int(y['correct']) for y in b)} |")
    if lines:
        print("\n### razorkv against kvpress on the same prompts (every prompt both ran)\n")
        print("| razorkv | kvpress | prompts | same score | same answer | razorkv correct | "
              "kvpress correct |")
        print("|---|---|--:|--:|--:|--:|--:|")
        print("\n".join(lines))


def budget_sweep(rows: list, solved: set) -> dict:
    """Accuracy on the solved cells per policy and budget, over the prompts every budget ran;
    prints the table and returns those prompts and {policy: [(bytes fraction, hits, prompts)]}."""
    rows = [r for r in rows if r["source"] == "razorkv"]
    budgets = sorted({r["budget"] for r in rows})
    if len(budgets) < 2:
        return {"prompts": set(), "lines": {}}
    prompts = None
    for b in budgets:
        ran = {prompt_key(r) for r in rows
               if r["budget"] == b and r["policy"] == "razor" and cell_key(r) in solved}
        prompts = ran if prompts is None else prompts & ran
    cells = collections.defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        if prompt_key(r) in prompts and r["policy"] in SWEPT + ["full"]:
            c = cells[(r["policy"], r["budget"])]
            c[0] += int(r["correct"])
            c[1] += 1
            c[2] += r["fraction"]
    lengths = sorted({k[2] for k in prompts})
    print(f"\n### The budget sweep: accuracy on the cells the full cache solves, % [95% interval] "
          f"(KV bytes / full), {len(prompts)} prompts at {', '.join(f'{n:,}' for n in lengths)} "
          "tokens\n")
    print("| cache | " + " | ".join(f"budget {b:.2f}" for b in budgets) + " |")
    print("|---|" + "--:|" * len(budgets))
    out = {}
    for p in ["full"] + SWEPT:
        got = [(b, cells[(p, b)]) for b in budgets if cells[(p, b)][1]]
        if not got:
            continue
        out[p] = [(c[2] / c[1], c[0], c[1]) for _, c in got]
        by_budget = dict(got)
        print(f"| {p} | " + " | ".join(
            f"{percent(by_budget[b][0], by_budget[b][1])} ({by_budget[b][2] / by_budget[b][1]:.2f})"
            if b in by_budget else "-" for b in budgets) + " |")
    return {"prompts": prompts, "lines": out}


def colour(x: float) -> str:
    # White (0) to dark green (1), readable at a glance and in grey.
    r, g, b = (int(255 + (c - 255) * x) for c in (0, 104, 55))
    return f"rgb({r},{g},{b})"


def write_heatmaps(path: Path, rows: list, lengths: list) -> None:
    depths = sorted({float(r["depth"]) for r in rows})
    cells = collections.defaultdict(lambda: [0, 0])
    for r in rows:
        if r["task"] == "single":
            c = cells[(r["policy"], int(r["length"]), float(r["depth"]))]
            c[0] += int(r["correct"])
            c[1] += 1
    names = list(dict.fromkeys(k[0] for k in cells))
    panels = [n for h in HEATMAP for n in names
              if n == h or (h.startswith("kvpress") and n.startswith(h + " ("))]
    size, gap, left, top = 34, 80, 70, 60
    panel_w = size * len(lengths)
    cols = 4
    width = left + cols * (panel_w + gap)
    height = top + math.ceil(len(panels) / cols) * (size * len(depths) + 80)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="DejaVu Sans, sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">Single needle recalled whole '
           '(number, word, code, UUID), by depth and context length</text>',
           f'<text x="{left}" y="40">every cache but full reads about a third of the KV bytes '
           '(llama.cpp q4_0: 0.28); white 0%, dark green 100%, the number is the count</text>']
    for i, p in enumerate(panels):
        x0 = left + (i % cols) * (panel_w + gap)
        y0 = top + (i // cols) * (size * len(depths) + 80) + 20
        svg.append(f'<text x="{x0}" y="{y0 - 6}" font-weight="bold">{p}</text>')
        for j, n in enumerate(lengths):
            svg.append(f'<text x="{x0 + j * size + size / 2}" y="{y0 + size * len(depths) + 14}" '
                       f'text-anchor="middle">{round(n / 1024)}K</text>')
            for k, d in enumerate(depths):
                hit, total = cells.get((p, n, d), [0, 0])
                fill = colour(hit / total) if total else "rgb(230,230,230)"
                y = y0 + k * size
                svg.append(f'<rect x="{x0 + j * size}" y="{y}" width="{size}" height="{size}" '
                           f'fill="{fill}" stroke="white"/>')
                if total:
                    ink = "white" if hit / total > 0.6 else "black"
                    svg.append(f'<text x="{x0 + j * size + size / 2}" y="{y + size / 2 + 4}" '
                               f'text-anchor="middle" fill="{ink}">{hit}/{total}</text>')
        if i % cols == 0:
            for k, d in enumerate(depths):
                svg.append(f'<text x="{x0 - 6}" y="{y0 + k * size + size / 2 + 4}" '
                           f'text-anchor="end">{d:.0%}</text>')
    svg.append("</svg>")
    path.write_text("\n".join(svg) + "\n", encoding="utf-8")


def write_policies(path: Path, rows: list, sweep: dict, solved: set) -> None:
    # Accuracy against the KV bytes each cache held (a fraction of the full cache's, f16 for
    # llama.cpp's types), on the prompts of the budget sweep only, so that every point is measured
    # on the same prompts: razorkv's policies as lines over the budgets, llama.cpp's and kvpress's
    # caches (at their default size or a third) as points.
    prompts = sweep["prompts"]
    if not prompts:  # no sweep: every prompt of the solved cells, one budget
        prompts = {prompt_key(r) for r in rows if cell_key(r) in solved}
    points = collections.defaultdict(lambda: [0, 0, 0.0])
    for r in rows:
        if prompt_key(r) in prompts and (r["policy"].startswith(("llama.cpp", "kvpress"))
                                         or not sweep["lines"]):
            p = points[r["policy"]]
            p[0] += int(r["correct"])
            p[1] += 1
            p[2] += r["fraction"]
    names = list(sweep["lines"]) + [n for n in points if n not in sweep["lines"]]
    palette = ["#000000", "#d62728", "#ff9896", "#7f7f7f", "#e377c2", "#9467bd", "#8c564b",
               "#c5b0d5", "#1f77b4", "#2ca02c", "#ff7f0e", "#17becf", "#bcbd22", "#aec7e8",
               "#98df8a", "#ffbb78", "#c49c94", "#dbdb8d"]
    colours = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    lengths = sorted({k[2] for k in prompts})
    plot_w, plot_h, left, top = 520, 360, 70, 70
    width, height = left + plot_w + 330, top + plot_h + 70
    sx = lambda f: left + f * plot_w  # noqa: E731
    sy = lambda a: top + (1 - a) * plot_h  # noqa: E731
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="DejaVu Sans, sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">Accuracy on the tasks the full '
           'cache solves, against KV bytes</text>',
           f'<text x="{left}" y="40">the same {len(prompts)} prompts at '
           f'{", ".join(f"{n:,}" for n in lengths)} tokens; lines: razorkv over its budgets; '
           'squares: llama.cpp; triangles: kvpress</text>',
           f'<line x1="{left}" y1="{sy(0)}" x2="{sx(1)}" y2="{sy(0)}" stroke="black"/>',
           f'<line x1="{left}" y1="{sy(0)}" x2="{left}" y2="{sy(1)}" stroke="black"/>',
           f'<text x="{sx(0.5)}" y="{sy(0) + 34}" text-anchor="middle">KV bytes / the full '
           'cache\'s</text>']
    for t in (0, 0.25, 0.5, 0.75, 1):
        svg.append(f'<text x="{sx(t)}" y="{sy(0) + 16}" text-anchor="middle">{t:g}</text>')
        svg.append(f'<text x="{left - 8}" y="{sy(t) + 4}" text-anchor="end">{t:.0%}</text>')
        svg.append(f'<line x1="{left}" y1="{sy(t)}" x2="{sx(1)}" y2="{sy(t)}" stroke="#ddd"/>')
    for name, line in sweep["lines"].items():
        xy = [(sx(f), sy(hit / total)) for f, hit, total in sorted(line)]
        width_px = 3 if name == "razor" else 1.5
        svg.append(f'<polyline fill="none" stroke="{colours[name]}" stroke-width="{width_px}" '
                   f'points="{" ".join(f"{x:.1f},{y:.1f}" for x, y in xy)}"/>')
        for x, y in xy:
            svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colours[name]}"/>')
    for name, (hit, total, fsum) in points.items():
        x, y, c = sx(fsum / total), sy(hit / total), colours[name]
        if name.startswith("llama.cpp"):
            svg.append(f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="{c}"/>')
        elif name.startswith("kvpress"):
            svg.append(f'<polygon points="{x:.1f},{y - 5:.1f} {x - 5:.1f},{y + 4:.1f} '
                       f'{x + 5:.1f},{y + 4:.1f}" fill="{c}"/>')
        else:
            svg.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{c}"/>')
    legend_x = left + plot_w + 40
    for i, name in enumerate(names):
        y = top + i * 16
        svg.append(f'<rect x="{legend_x}" y="{y - 8}" width="10" height="10" fill="{colours[name]}"/>')
        svg.append(f'<text x="{legend_x + 16}" y="{y + 1}">{name}</text>')
    svg.append("</svg>")
    path.write_text("\n".join(svg) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
