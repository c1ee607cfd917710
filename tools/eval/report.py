"""Tables and figures of the long-context evaluation from the CSV files it wrote.

    python3 report.py OUT_DIR [RUN_DIR ...]
    python3 report.py --merge OUT_DIR RUN_DIR ...   (one results/likelihood/llama_cpp.csv each)

Each RUN_DIR holds a razorkv_smollm2_eval run (results.csv, likelihood.csv), llama_cpp.csv
(tools/eval/llama_cpp_kv.py), or both. Prints the markdown tables of docs/real_model.md and
writes OUT_DIR/needles.svg (single-needle recall by depth and length, one panel per cache) and
OUT_DIR/policies.svg (accuracy on the tasks the full cache solves against KV bytes). Python's
standard library only.

The headline keeps the (task, length) cells where the full cache answers at least CUT of the
prompts: a policy cannot be blamed for what the model cannot do. The rest is reported apart.
"""
import collections
import csv
import math
import sys
from pathlib import Path

CUT = 0.8
HEATMAP = ["full", "razor", "razor random groups", "streaming_llm", "snapkv", "h2o",
           "snapkv (question in the prompt)", "llama.cpp q4_0"]


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


def load(run_dirs: list) -> tuple:
    rows, likelihood = [], []
    for d in run_dirs:
        d = Path(d)
        if (d / "results.csv").exists():
            with open(d / "results.csv", encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    if r["query_aware"] == "1":
                        r["policy"] += " (question in the prompt)"
                    r["fraction"] = int(r["kv_bytes"]) / int(r["full_bytes"])
                    rows.append(r)
        if (d / "llama_cpp.csv").exists():
            with open(d / "llama_cpp.csv", encoding="utf-8") as f:
                for r in csv.DictReader(f):
                    r["policy"] = r.pop("cache")
                    r["fraction"] = float(r["kv_fraction"])
                    rows.append(r)
        if (d / "likelihood.csv").exists():
            with open(d / "likelihood.csv", encoding="utf-8") as f:
                likelihood += list(csv.DictReader(f))
    return rows, likelihood


def cell_key(r: dict) -> tuple:
    return (variant(r), int(r["length"]))


def prompt_key(r: dict) -> tuple:
    return (r["task"], r["needle"], int(r["length"]), r["depth"], r["rep"])


def percent(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.0f} [{100 * lo:.0f}, {100 * hi:.0f}]" if n else "-"


def merge(out_dir: Path, run_dirs: list) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("results.csv", "likelihood.csv", "llama_cpp.csv"):
        header, body = None, []
        for d in run_dirs:
            if (Path(d) / name).exists():
                with open(Path(d) / name, newline="", encoding="utf-8") as f:
                    rows = list(csv.reader(f))
                if rows:
                    header = header or rows[0]
                    body += rows[1:]
        if header:
            with open(out_dir / name, "w", newline="", encoding="utf-8") as f:
                csv.writer(f, lineterminator="\n").writerows([header] + body)


def main() -> None:
    if sys.argv[1] == "--merge":
        merge(Path(sys.argv[2]), sys.argv[3:])
        return
    out_dir, run_dirs = Path(sys.argv[1]), sys.argv[2:]
    rows, likelihood = load(run_dirs)
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
        cells = [f"{per_task[(p, v)][0]}/{per_task[(p, v)][1]}" for v in solved_variants]
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
        print("| cache | " + " | ".join(f"{n:,}" for n in ll_lengths) + " |")
        print("|---|" + "--:|" * len(ll_lengths))
        for p in dict.fromkeys(r["policy"] for r in likelihood):
            cells = []
            for n in ll_lengths:
                nll, kl, agree, scored, _ = agg[(p, n)]
                cells.append(f"{math.exp(nll / scored):.2f} / {kl / scored:.4f} / "
                             f"{100 * agree / scored:.0f}%")
            print(f"| {p} | " + " | ".join(cells) + " |")

    out_dir.mkdir(parents=True, exist_ok=True)
    write_heatmaps(out_dir / "needles.svg", rows, lengths)
    write_policies(out_dir / "policies.svg", rows, solved)


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
    panels = [p for p in HEATMAP if any(k[0] == p for k in cells)]
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
           f'<text x="{left}" y="40">every cache but full at the same KV bytes (about a third); '
           'white 0%, dark green 100%, the number is the count</text>']
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


def write_policies(path: Path, rows: list, solved: set) -> None:
    # Accuracy on the solved cells against the KV bytes each cache held (a fraction of the full
    # cache's), one panel for the length llama.cpp ran at and one for the longer ones, so that
    # every point in a panel is measured on the same prompts.
    llama_lengths = {int(r["length"]) for r in rows if r["policy"].startswith("llama.cpp")}
    panels = [("1,024 tokens", lambda n: n in llama_lengths),
              ("2,048 to 8,128 tokens", lambda n: n not in llama_lengths)]
    names = list(dict.fromkeys(r["policy"] for r in rows))
    palette = ["#000000", "#d62728", "#ff9896", "#9467bd", "#c5b0d5", "#8c564b", "#7f7f7f",
               "#e377c2", "#bcbd22", "#17becf", "#1f77b4", "#2ca02c", "#ff7f0e", "#aec7e8",
               "#98df8a", "#ffbb78", "#c49c94", "#dbdb8d"]
    colours = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    panel_w, plot_h, left, top, gap = 300, 340, 70, 70, 70
    width, height = left + 2 * panel_w + gap + 290, top + plot_h + 70
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="DejaVu Sans, sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">Accuracy on the tasks the full '
           'cache solves, against KV bytes</text>',
           f'<text x="{left}" y="40">KV bytes as a fraction of the full cache (f16 for llama.cpp\'s '
           'types); every razorkv cache but full at one budget, a third</text>']
    for k, (title, keep) in enumerate(panels):
        x0 = left + k * (panel_w + gap)
        sx = lambda f, x0=x0: x0 + f * panel_w  # noqa: E731
        sy = lambda a: top + (1 - a) * plot_h  # noqa: E731
        svg.append(f'<text x="{x0}" y="{top - 10}" font-weight="bold">{title}</text>')
        svg.append(f'<line x1="{x0}" y1="{sy(0)}" x2="{sx(1)}" y2="{sy(0)}" stroke="black"/>')
        svg.append(f'<line x1="{x0}" y1="{sy(0)}" x2="{x0}" y2="{sy(1)}" stroke="black"/>')
        for t in (0, 0.25, 0.5, 0.75, 1):
            svg.append(f'<text x="{sx(t)}" y="{sy(0) + 16}" text-anchor="middle">{t:g}</text>')
            svg.append(f'<text x="{x0 - 8}" y="{sy(t) + 4}" text-anchor="end">{t:.0%}</text>')
            svg.append(f'<line x1="{x0}" y1="{sy(t)}" x2="{sx(1)}" y2="{sy(t)}" stroke="#ddd"/>')
        points = collections.defaultdict(lambda: [0, 0, 0.0])
        for r in rows:
            if cell_key(r) in solved and keep(int(r["length"])):
                p = points[r["policy"]]
                p[0] += int(r["correct"])
                p[1] += 1
                p[2] += r["fraction"]
        for name, (hit, total, fsum) in points.items():
            f, a, c = fsum / total, hit / total, colours[name]
            if name.startswith("llama.cpp"):
                svg.append(f'<rect x="{sx(f) - 4:.1f}" y="{sy(a) - 4:.1f}" width="8" height="8" '
                           f'fill="{c}"/>')
            else:
                svg.append(f'<circle cx="{sx(f):.1f}" cy="{sy(a):.1f}" r="4" fill="{c}"/>')
    legend_x = left + 2 * panel_w + gap + 40
    for i, name in enumerate(names):
        y = top + i * 16
        svg.append(f'<rect x="{legend_x}" y="{y - 8}" width="10" height="10" fill="{colours[name]}"/>')
        svg.append(f'<text x="{legend_x + 16}" y="{y + 1}">{name}</text>')
    svg.append("</svg>")
    path.write_text("\n".join(svg) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
