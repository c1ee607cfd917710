#!/usr/bin/env python3
# Draws the training curves of train_log.tsv as an SVG (no plotting library needed): the losses,
# and the copy probe's accuracy, against the tokens seen, with the curriculum's phases marked.
import argparse
import csv


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("log", help="train_log.tsv")
    parser.add_argument("out", help="output .svg")
    args = parser.parse_args()
    with open(args.log) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    tokens = [int(r["tokens"]) / 1e6 for r in rows]
    series = [
        ("training loss (nats / byte)", [float(r["train_loss"]) for r in rows], "#1f77b4", 0),
        ("held-out text (bits / byte)", [float(r["heldout_bpb"]) for r in rows], "#2ca02c", 0),
        ("loss on the repeated half (nats / byte)", [float(r["repeat_loss"]) for r in rows], "#ff7f0e", 0),
        ("copy probe accuracy", [float(r["copy_acc"]) for r in rows], "#d62728", 1),
    ]
    width, height, left, top, panel_w, panel_h, gap = 980, 370, 60, 40, 380, 230, 110
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" fill="white"/>']
    x_max = max(tokens)
    for panel, (title, lo, hi) in enumerate([("losses", 0.0, 6.0), ("copy probe accuracy", 0.0, 1.0)]):
        x0 = left + panel * (panel_w + gap)
        y1 = top + panel_h
        px = lambda t: x0 + panel_w * t / x_max  # noqa: E731
        py = lambda v: y1 - panel_h * (min(max(v, lo), hi) - lo) / (hi - lo)  # noqa: E731
        svg.append(f'<text x="{x0}" y="{top - 12}" font-size="14">{title}</text>')
        svg.append(f'<line x1="{x0}" y1="{y1}" x2="{x0 + panel_w}" y2="{y1}" stroke="black"/>')
        svg.append(f'<line x1="{x0}" y1="{top}" x2="{x0}" y2="{y1}" stroke="black"/>')
        for k in range(5):
            v = lo + (hi - lo) * k / 4
            svg.append(f'<text x="{x0 - 5}" y="{py(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
            t = x_max * k / 4
            svg.append(f'<text x="{px(t):.1f}" y="{y1 + 16}" text-anchor="middle">{t:.0f}</text>')
        svg.append(f'<text x="{x0 + panel_w / 2}" y="{y1 + 34}" text-anchor="middle">tokens seen (millions)</text>')
        previous = None
        for t, r in zip(tokens, rows):  # phase boundaries
            if previous is not None and r["phase"] != previous:
                svg.append(f'<line x1="{px(t):.1f}" y1="{top}" x2="{px(t):.1f}" y2="{y1}" stroke="#bbbbbb" '
                           'stroke-dasharray="4,3"/>')
                svg.append(f'<text x="{px(t) + 3:.1f}" y="{top + 12}" fill="#888888">{r["phase"]}</text>')
            previous = r["phase"]
        legend = 0
        for name, values, colour, target in series:
            if target != panel:
                continue
            points = " ".join(f"{px(t):.1f},{py(v):.1f}" for t, v in zip(tokens, values))
            svg.append(f'<polyline fill="none" stroke-width="1.5" stroke="{colour}" points="{points}"/>')
            ly = y1 + 50 + 14 * legend
            svg.append(f'<rect x="{x0}" y="{ly - 5}" width="14" height="4" fill="{colour}"/>'
                       f'<text x="{x0 + 20}" y="{ly}">{name}</text>')
            legend += 1
    svg.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
