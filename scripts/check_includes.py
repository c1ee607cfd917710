#!/usr/bin/env python3
"""The include graph of include/razorkv/: every header includes only headers of its own room or of
the rooms below it, in the order below (detail/ is the toolbox everyone uses, attention/ the
operation over the caches and kernels, eval/ the harness over everything). Prints the arrows
between rooms with their counts and exits 1 on an arrow that runs back up.

    python3 scripts/check_includes.py [ROOT]   (ROOT: the repository, default this one)
"""
import collections
import pathlib
import re
import sys

# Lowest first. config.hpp and error.hpp are the base; the umbrellas razorkv.hpp and eval.hpp
# sit above everything.
ROOMS = ["base", "core", "detail", "quant", "cache", "kernels", "attention", "compress", "policies",
         "scoring", "select", "synthetic", "io", "eval", "umbrella"]
BASE = {"config.hpp", "error.hpp"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"razorkv/([^"]+)"', re.M)


def room_of(relative):
    parts = relative.split("/")
    if len(parts) == 1:
        return "base" if parts[0] in BASE else "umbrella"
    return parts[0]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    include = root / "include" / "razorkv"
    rank = {room: i for i, room in enumerate(ROOMS)}
    arrows = collections.Counter()
    upward = []
    for header in sorted(include.rglob("*.hpp")):
        source = header.relative_to(include).as_posix()
        for target in INCLUDE.findall(header.read_text()):
            a, b = room_of(source), room_of(target)
            if a not in rank or b not in rank:
                upward.append(f"{source} -> {target}: room not in the order (scripts/check_includes.py)")
                continue
            if a != b:
                arrows[(a, b)] += 1
            if rank[b] > rank[a]:
                upward.append(f"{source} ({a}) -> {target} ({b})")
    for (a, b), n in sorted(arrows.items(), key=lambda e: (rank.get(e[0][0], 99), e[0][1])):
        print(f"{a:>10} -> {b:<10} {n}")
    print(f"{sum(arrows.values())} includes between rooms, {len(upward)} upward")
    for line in upward:
        print(f"upward: {line}", file=sys.stderr)
    return 1 if upward else 0


if __name__ == "__main__":
    sys.exit(main())
