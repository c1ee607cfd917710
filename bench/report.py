#!/usr/bin/env python3
"""The decode and compression figures of docs/benchmarks.md, from one command.

Runs build/bench's razorkv_bench (compiled with -march=native, header-only kernels) and
razorkv_bench_portable (default flags, razorkv::kernels picking its kernels at run time) with
the same cases, razorkv_bench_o2 (razorkv_bench at -O2, where it was built) with the in-cache
decode and compression cases, and, where razorkv::kernels picks its AVX-512 kernels tuned for AMD
Zen, razorkv_bench_portable once more with the default-tuned ones (RAZORKV_KERNEL_ISA=avx512) on
the decode cases, taking turns round by round, and prints markdown tables of
medians: each figure beside the read bandwidth (BM_MemoryRead_Sum) measured in the same rounds of
the same binary, and each decode shape beside what bounds it (the read bandwidth, or its in-cache
rate and the multiply-add peak, BM_FmaPeak). Where razorkv_bench was built with ggml
(RAZORKV_GGML_SOURCE_DIR, bench/fetch_ggml.sh), also ggml's CPU flash attention on the same K/V.
Then it compares the portable build with native case by case (decode and compression at 32K
tokens and more, the two binaries running each case back to back).

    OMP_NUM_THREADS=2 python3 bench/report.py build/bench/bench [--repetitions 5] [--min-time 0.2]
        [--warmup-time 0.05] [--paired-rounds 3] [--save-rounds rounds.json]
    python3 bench/report.py --from-rounds rounds.json   # the same tables again, running nothing
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

CASES = ("MemoryRead|FmaPeak|Decode_Razorkv|Decode_InCache|Decode_RazorCache|Decode_PlainEigen|Decode_Ggml"
         "|Compress_RazorCache|Decode_FanOut")
# razorkv_bench_o2 runs only what sets the optimisation level's cost apart from the memory's.
O2_COMPRESS_TOKENS = 65536
O2_CASES = rf"Decode_InCache|Compress_RazorCache<[^>]*>/tokens:{O2_COMPRESS_TOKENS}/"
# The portable binary with the default-tuned AVX-512 kernels: the decode cases the target is set on.
TUNING_CASES = r"Decode_Razorkv<[^>]*>/tokens:(32768|131072)/|Decode_InCache"
DTYPE_BYTES = {"float": 4, "Eigen::half": 2, "Eigen::bfloat16": 2}
# What the portable build is held to within 10% of native on, case by case: decode and compression
# into a reused cache, at 32K tokens and more (where the K/V are far larger than the cache).
PAIRED_CASES = r"BM_(Decode_Razorkv|Compress_RazorCache)<([^>]*)>/tokens:(\d+)/(?:group:(\d+)/)?real_time$"
PAIRED_MIN_TOKENS = 32768


def run_rounds(binaries, args):
    """Medians (real time, bytes/s, items/s, label, counters) of every case of each binary, by name.
    binaries: (path, case filter, environment variables to add) triples.

    The binaries take turns, one repetition of every case each per round, so that a ratio between
    them compares runs minutes apart at most: this machine's memory bandwidth drifts over minutes.
    """
    runs = [{} for _ in binaries]
    for round_index in range(args.repetitions):
        for (binary, cases, env), binary_runs in zip(binaries, runs):
            command = [binary, f"--benchmark_filter={cases}", "--benchmark_format=json",
                       "--benchmark_repetitions=1", f"--benchmark_min_time={args.min_time}",
                       f"--benchmark_min_warmup_time={args.warmup_time}",
                       "--benchmark_enable_random_interleaving=true"]
            print(f"round {round_index + 1}/{args.repetitions}:", *(f"{k}={v}" for k, v in env.items()),
                  " ".join(command), file=sys.stderr, flush=True)
            report = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE,
                                               env=dict(os.environ, **env)).stdout)
            for b in report["benchmarks"]:
                if b.get("run_type") == "iteration":
                    binary_runs.setdefault(b["run_name"], []).append(b)
    return [{name: summary(reps) for name, reps in binary_runs.items()} for binary_runs in runs]


def run_pairs(native, portable, names, args):
    """Portable's GB/s over native's for each case in names, a ratio per round: the two binaries run
    the one case back to back, seconds apart, the first of the two alternating from round to round.
    In the rounds of run_rounds a binary's turn lasts minutes, and this machine's bandwidth can move
    by half between two turns; seconds apart it moves far less, so these ratios measure the builds
    rather than the machine."""
    ratios = {name: [] for name in names}
    for round_index in range(args.paired_rounds):
        pair = (native, portable) if round_index % 2 == 0 else (portable, native)
        print(f"pairs {round_index + 1}/{args.paired_rounds}: {len(names)} cases, {pair[0]} first",
              file=sys.stderr, flush=True)
        for name in names:
            gbs = {}
            for binary in pair:
                command = [binary, f"--benchmark_filter=^{re.escape(name)}$", "--benchmark_format=json",
                           "--benchmark_repetitions=1", f"--benchmark_min_time={args.min_time}",
                           f"--benchmark_min_warmup_time={args.warmup_time}"]
                report = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE).stdout)
                runs = [b for b in report["benchmarks"] if b.get("run_type") == "iteration"]
                if len(runs) != 1:
                    sys.exit(f"report.py: {binary} ran {len(runs)} cases for the filter ^{name}$, not one")
                gbs[binary] = runs[0]["bytes_per_second"]
            ratios[name].append(gbs[portable] / gbs[native])
    return ratios


def summary(reps):
    return {
        "ms": statistics.median(r["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[r["time_unit"]]
                                for r in reps),
        "gbs": statistics.median(r.get("bytes_per_second", 0.0) for r in reps) / 1e9,
        "name": reps[0]["run_name"],
        "gbs_by_round": [r.get("bytes_per_second", 0.0) / 1e9 for r in reps],
        "per_second": statistics.median(r.get("items_per_second", 0.0) for r in reps),
        "label": reps[0].get("label", ""),
        "dense_over_razor": reps[0].get("dense_over_razor"),
        "relative_difference": reps[0].get("relative_difference"),
    }


def share_of_read(figure, read):
    """A case's share of the read bandwidth: the median over the rounds of its GB/s over the read
    bandwidth measured in the same round of the same binary (the bandwidth moves between rounds,
    so a ratio of the two medians could pair a fast round's figure with a slow round's bandwidth)."""
    if len(figure["gbs_by_round"]) != len(read["gbs_by_round"]):
        sys.exit(f"report.py: {figure['name']} ran in {len(figure['gbs_by_round'])} rounds and "
                 f"{read['name']} in {len(read['gbs_by_round'])}: a share pairs them round by round")
    return statistics.median(f / r for f, r in zip(figure["gbs_by_round"], read["gbs_by_round"]))


def print_table_head(*columns):
    """A markdown table's header and separator. A column whose name ends in ":" is right-aligned
    (numbers), and its name is printed without the colon."""
    names = [c[:-1] if c.endswith(":") else c for c in columns]
    print("| " + " | ".join(names) + " |")
    print("|" + "|".join("-" * (len(n) + 1) + ":" if c.endswith(":") else "-" * (len(n) + 2)
                         for c, n in zip(columns, names)) + "|")


def case(kind, dtype, tokens, group=None):
    name = f"BM_{kind}<{dtype}>/tokens:{tokens}"
    return name + (f"/group:{group}" if group is not None else "") + "/real_time"


def cases_of(medians, pattern):
    found = set()
    for name in medians:
        m = re.match(pattern, name)
        if m:
            found.add(tuple(int(x) for x in m.groups()))
    return sorted(found)


def print_roofs(native, read, dtypes, short, group_name):
    """What bounds each dense decode shape: the memory (the read bandwidth) or the arithmetic (the
    in-cache rate, and above it the multiply-add peak), all from the same run of the native binary."""
    peak = native.get("BM_FmaPeak/real_time")
    if peak is None:
        return
    macs = peak["per_second"]
    read_gbs = read["gbs"]
    print(f"Roofs: cold decode against the lower of the read bandwidth ({read_gbs:.1f} GB/s) and the "
          f"same kernel with the layer in cache (1K tokens); the multiply-add peak (BM_FmaPeak, "
          f"{macs / 1e9:.0f} G/s) caps a shape at peak x sizeof(dtype) / group bytes/s\n")
    print_table_head("group", "dtype", "multiply-add roof:", "in cache:", "of multiply-add roof:", "bound:",
                     "cold, by tokens:", "cold of bound:")
    for dtype in dtypes:
        for (group,) in cases_of(native, rf"BM_Decode_InCache<{re.escape(dtype)}>/group:(\d+)/"):
            hot = native[f"BM_Decode_InCache<{dtype}>/group:{group}/real_time"]["gbs"]
            roof = macs * DTYPE_BYTES[dtype] / group / 1e9
            bound = min(read_gbs, hot)
            cold = [(tokens, native[case("Decode_Razorkv", dtype, tokens, group)])
                    for tokens, g in cases_of(native, rf"BM_Decode_Razorkv<{re.escape(dtype)}>/tokens:(\d+)/group:(\d+)/")
                    if g == group and 32768 <= tokens <= 131072]
            # Against the memory round by round (share_of_read), against the in-cache rate by medians.
            shares = [share_of_read(c, read) if read_gbs <= hot else c["gbs"] / hot for _, c in cold]
            rates = ", ".join(f"{t // 1024}K {c['gbs']:.1f}" for t, c in cold)
            print(f"| {group_name.get(group, group)} | {short[dtype]} | {roof:.0f} | {hot:.1f} "
                  f"| {100 * hot / roof:.0f}% | {bound:.1f} ({'memory' if read_gbs <= hot else 'arithmetic'}) "
                  f"| {rates} | {', '.join(f'{100 * x:.0f}%' for x in shares)} |")
    print()


def in_cache_cases(medians, dtype, group_name):
    """(label, case name) of every in-cache decode (BM_Decode_InCache) of dtype that ran."""
    return [(f"decode in cache, {group_name.get(g, g)}", f"BM_Decode_InCache<{dtype}>/group:{g}/real_time")
            for (g,) in cases_of(medians, rf"BM_Decode_InCache<{re.escape(dtype)}>/group:(\d+)/")]


def kernel_label(binary):
    """The kernel set a razorkv::kernels binary picks on this CPU (its decode cases' label)."""
    command = [binary, "--benchmark_filter=BM_Decode_Razorkv<float>/tokens:4096/group:1/",
               "--benchmark_format=json", "--benchmark_min_time=0.01"]
    report = json.loads(subprocess.run(command, check=True, stdout=subprocess.PIPE).stdout)
    return report["benchmarks"][0].get("label", "") if report["benchmarks"] else ""


def print_pairs(pairs, short, group_name):
    """The portable build against native, case by case (run_pairs)."""
    if not pairs:
        return
    rounds = len(next(iter(pairs.values())))
    print(f"Portable build against native, case by case: each case run by the two binaries back to back, "
          f"{rounds} rounds, the first of each pair alternating; portable's GB/s over native's\n")
    print_table_head("case", "tokens:", "group", "dtype", "portable / native:", "range over the rounds:")
    within = 0
    for name, ratios in sorted(pairs.items(), key=lambda item: pair_order(item[0])):
        kind, dtype, tokens, group = re.match(PAIRED_CASES, name).groups()
        ratio = statistics.median(ratios)
        within += abs(ratio - 1.0) <= 0.1
        print(f"| {'decode' if kind == 'Decode_Razorkv' else 'compression, reused'} | {int(tokens):,} "
              f"| {group_name.get(int(group), group) if group else '-'} | {short.get(dtype, dtype)} "
              f"| {ratio:.2f} | {min(ratios):.2f}-{max(ratios):.2f} |")
    print(f"\nWithin 10% of native: {within} of {len(pairs)} cases.\n")


def pair_order(name):
    """Sort key of a paired case: decode before compression, then dtype, tokens and group."""
    kind, dtype, tokens, group = re.match(PAIRED_CASES, name).groups()
    return (kind != "Decode_Razorkv", list(DTYPE_BYTES).index(dtype) if dtype in DTYPE_BYTES else 9,
            int(tokens), int(group or 0))


def print_tuning(portable, default_tuned, dtypes, short, group_name):
    """razorkv::kernels' AVX-512 kernels tuned for Zen (what an AMD CPU gets) against the same
    instructions with the compiler's default tuning (RAZORKV_KERNEL_ISA=avx512), same rounds."""
    if not default_tuned:
        return
    print("Portable build, AVX-512 kernels by tuning: avx512_zen (chosen on this AMD CPU) against avx512 "
          "(default tuning, RAZORKV_KERNEL_ISA=avx512), GB/s\n")
    print_table_head("case", "dtype", "avx512_zen:", "avx512:", "avx512 / avx512_zen time:")
    for dtype in dtypes:
        names = in_cache_cases(default_tuned, dtype, group_name)
        names += [(f"decode {t // 1024}K tokens, {group_name.get(g, g)}", case("Decode_Razorkv", dtype, t, g))
                  for t, g in cases_of(default_tuned, rf"BM_Decode_Razorkv<{re.escape(dtype)}>/tokens:(\d+)/group:(\d+)/")]
        for label, name in names:
            zen, generic = portable.get(name), default_tuned.get(name)
            if zen and generic:
                print(f"| {label} | {short[dtype]} | {zen['gbs']:.1f} | {generic['gbs']:.1f} "
                      f"| {generic['ms'] / zen['ms']:.2f} |")
    print()


def print_o2(native, at_o2, dtypes, short, group_name):
    """The kernels header-only at -O2 (razorkv_bench_o2) against -O3 (razorkv_bench), same rounds."""
    if not at_o2:
        print("(razorkv_bench_o2 was not built: no -O2 table)\n")
        return
    print(f"At -O2: the in-cache decode and the reused compression ({O2_COMPRESS_TOKENS // 1024}K tokens) of "
          "razorkv_bench_o2 against razorkv_bench (-O3), GB/s\n")
    print_table_head("case", "dtype", "-O3:", "-O2:", "-O2 / -O3 time:")
    for dtype in dtypes:
        names = in_cache_cases(at_o2, dtype, group_name)
        names.append(("compression, reused", case("Compress_RazorCache", dtype, O2_COMPRESS_TOKENS)))
        for label, name in names:
            o3, o2 = native.get(name), at_o2.get(name)
            if o3 and o2:
                print(f"| {label} | {short[dtype]} | {o3['gbs']:.1f} | {o2['gbs']:.1f} | {o2['ms'] / o3['ms']:.2f} |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench_dir", nargs="?", help="the folder holding razorkv_bench (and "
                        "razorkv_bench_portable and razorkv_bench_o2, where built)")
    parser.add_argument("--repetitions", type=int, default=5,
                        help="rounds: each binary runs every case once per round")
    parser.add_argument("--min-time", default="0.2")
    # A case's first pass can be several times slower than the next ones on the development VM (the
    # read bandwidth's 1 GiB buffer read at 9 GB/s in a round's one timed pass, 40-45 GB/s in a run
    # of its own), and Google Benchmark keeps a first pass that outlasts --min-time as the
    # measurement; so every case runs this long untimed first. It changes no cache state the tables
    # count on: the cold cases' K/V are far larger than the last-level cache, so the timed passes
    # still read them from DRAM.
    parser.add_argument("--warmup-time", default="0.05",
                        help="seconds each case runs untimed before it is measured")
    parser.add_argument("--filter", default=CASES)
    # Each paired case starts both binaries afresh, and filling a 256K-token layer takes seconds:
    # a round of the 42 cases took about 6 minutes on the development VM.
    parser.add_argument("--paired-rounds", type=int, default=3,
                        help="rounds of the case-by-case comparison of the portable build with native "
                             "(0: none)")
    parser.add_argument("--save-rounds", metavar="FILE",
                        help="also write the figures the tables are made of (medians, and each round's GB/s) "
                             "to FILE (JSON), for --from-rounds")
    parser.add_argument("--from-rounds", metavar="FILE",
                        help="print the tables of the rounds saved in FILE; runs nothing")
    args = parser.parse_args()
    if args.repetitions < 1 or args.paired_rounds < 0:
        parser.error(f"--repetitions must be at least 1 (got {args.repetitions}) and --paired-rounds at least 0 "
                     f"(got {args.paired_rounds})")
    if (args.bench_dir is None) == (args.from_rounds is None):
        parser.error("give either bench_dir or --from-rounds FILE")
    if args.from_rounds:
        with open(args.from_rounds) as f:
            saved = json.load(f)
        print_tables(saved["runs"], saved["repetitions"], saved["omp_num_threads"])
        return

    def path(name):
        return os.path.join(args.bench_dir, name)

    # (key, path, case filter, environment): razorkv_bench, and the others where built.
    binaries = [("native", path("razorkv_bench"), args.filter, {})]
    if os.path.exists(path("razorkv_bench_portable")):
        binaries.append(("portable", path("razorkv_bench_portable"), args.filter, {}))
        if kernel_label(path("razorkv_bench_portable")) == "avx512_zen":
            binaries.append(("default_tuned", path("razorkv_bench_portable"), TUNING_CASES,
                             {"RAZORKV_KERNEL_ISA": "avx512"}))
    if os.path.exists(path("razorkv_bench_o2")):
        binaries.append(("o2", path("razorkv_bench_o2"), O2_CASES, {}))
    runs = dict(zip((key for key, *_ in binaries), run_rounds([b[1:] for b in binaries], args)))
    if "portable" in runs and args.paired_rounds > 0:
        paired = [name for name in runs["native"] if name in runs["portable"] and
                  (m := re.match(PAIRED_CASES, name)) and int(m.group(3)) >= PAIRED_MIN_TOKENS]
        runs["pairs"] = run_pairs(path("razorkv_bench"), path("razorkv_bench_portable"), sorted(paired), args)
    threads = os.environ.get("OMP_NUM_THREADS", "all")
    if args.save_rounds:
        with open(args.save_rounds, "w") as f:
            json.dump({"repetitions": args.repetitions, "omp_num_threads": threads, "runs": runs}, f)
    print_tables(runs, args.repetitions, threads)


def print_tables(runs, repetitions, threads):
    """The markdown tables of runs ({binary key: {case name: summary}}, and under "pairs" {case name:
    [portable / native, a ratio per paired round]}), repetitions rounds long, run with
    OMP_NUM_THREADS=threads."""
    native = runs["native"]
    if "BM_MemoryRead_Sum/real_time" not in native:
        sys.exit("report.py: the rounds hold no BM_MemoryRead_Sum, which every share is divided by "
                 "(a --filter that leaves it out?)")
    portable = runs.get("portable", {})
    default_tuned = runs.get("default_tuned", {})
    at_o2 = runs.get("o2", {})
    read_case = {"native": native["BM_MemoryRead_Sum/real_time"]}
    if portable:
        read_case["portable"] = portable["BM_MemoryRead_Sum/real_time"]

    def read_bandwidth(key):
        rounds = read_case[key]["gbs_by_round"]
        return f"{key} run {read_case[key]['gbs']:.1f} GB/s ({min(rounds):.1f}-{max(rounds):.1f} over the rounds)"

    print("Read bandwidth (BM_MemoryRead_Sum): " + ", ".join(read_bandwidth(key) for key in read_case)
          + f"; OMP_NUM_THREADS={threads}; medians of {repetitions} rounds, the binaries taking turns"
          + " and each round's cases in random order.")
    if portable:
        decode = next((n for n in portable if n.startswith("BM_Decode_Razorkv")), None)
        if decode:
            print(f"Portable build's kernels: {portable[decode]['label']} (chosen at run time).")
    print()

    dtypes = ["float", "Eigen::half", "Eigen::bfloat16"]
    short = {"float": "float", "Eigen::half": "half", "Eigen::bfloat16": "bfloat16"}
    group_name = {1: "MHA (1)", 4: "GQA 4", 8: "GQA 8"}

    print("Dense decode (GB/s of K/V read; share of the same run's read bandwidth)\n")
    print_table_head("tokens:", "group", "dtype", "native:", "of read bw:", "portable:", "portable / native:",
                     "plain Eigen:")
    for dtype in dtypes:
        for tokens, group in cases_of(native, rf"BM_Decode_Razorkv<{re.escape(dtype)}>/tokens:(\d+)/group:(\d+)/"):
            if tokens > 131072:
                continue
            n = native[case("Decode_Razorkv", dtype, tokens, group)]
            p = portable.get(case("Decode_Razorkv", dtype, tokens, group))
            e = native.get(case("Decode_PlainEigen", dtype, tokens, group))
            row = (f"| {tokens:,} | {group_name.get(group, group)} | {short[dtype]} | {n['gbs']:.1f} "
                   f"| {100 * share_of_read(n, read_case['native']):.0f}% ")
            row += f"| {p['gbs']:.1f} | {p['gbs'] / n['gbs']:.2f} " if p else "| - | - "
            row += f"| {e['gbs']:.1f} |" if e else "| - |"
            print(row)
    print()

    print_roofs(native, read_case["native"], dtypes, short, group_name)

    ggml = any(name.startswith("BM_Decode_Ggml") for name in native)
    print("Against ggml's CPU flash attention (ggml_flash_attn_ext on the same K/V memory, "
          "ggml's own threads, as many; GB/s of K/V read)\n")
    if not ggml:
        print("(no ggml case ran: razorkv_bench was built without ggml, see bench/fetch_ggml.sh, or --filter "
              "left its cases out)\n")
    else:
        print_table_head("tokens:", "group", "dtype", "razorkv:", "ggml:", "razorkv / ggml time:",
                         "ggml's difference:")
        for dtype in dtypes:
            for tokens, group in cases_of(native, rf"BM_Decode_Ggml<{re.escape(dtype)}>/tokens:(\d+)/group:(\d+)/"):
                r = native.get(case("Decode_Razorkv", dtype, tokens, group))
                g = native[case("Decode_Ggml", dtype, tokens, group)]
                if r is None:
                    continue
                print(f"| {tokens:,} | {group_name.get(group, group)} | {short[dtype]} | {r['gbs']:.1f} "
                      f"| {g['gbs']:.1f} | {r['ms'] / g['ms']:.2f} | {g['relative_difference']:.1e} |")
        print()

    print("Decode over the RazorAttention cache vs the dense cache (same layer; razor GB/s count "
          "the bytes the razor cache holds)\n")
    print_table_head("tokens:", "group", "dtype", "dense:", "razor:", "speed-up:", "dense / razor bytes:",
                     "razor GB/s:", "of read bw:")
    for dtype in dtypes:
        for tokens, group in cases_of(native, rf"BM_Decode_RazorCache<{re.escape(dtype)}>/tokens:(\d+)/group:(\d+)/"):
            d = native.get(case("Decode_Razorkv", dtype, tokens, group))
            r = native[case("Decode_RazorCache", dtype, tokens, group)]
            if d is None:
                continue
            print(f"| {tokens:,} | {group_name.get(group, group)} | {short[dtype]} | {d['ms']:.2f} ms "
                  f"| {r['ms']:.2f} ms | {d['ms'] / r['ms']:.2f}x | {r['dense_over_razor']:.2f} "
                  f"| {r['gbs']:.1f} | {100 * share_of_read(r, read_case['native']):.0f}% |")
    print()

    print("Compression (GB/s of the prefill's K/V read; into a reused cache, a freshly allocated one, "
          "a fresh one on a huge_page_resource, and a fresh one on a huge_page_resource that keeps "
          "freed blocks)\n")
    print_table_head("tokens:", "dtype", "reused:", "of read bw:", "fresh:", "fresh / reused time:",
                     "fresh, huge pages:", "huge pages / reused time:", "fresh, kept pages:", "kept / reused time:",
                     "portable reused:")
    for dtype in dtypes:
        for (tokens,) in cases_of(native, rf"BM_Compress_RazorCache<{re.escape(dtype)}>/tokens:(\d+)/"):
            reused = native[case("Compress_RazorCache", dtype, tokens)]
            fresh = native.get(case("Compress_RazorCache_FreshAllocation", dtype, tokens))
            huge = native.get(case("Compress_RazorCache_FreshHugePages", dtype, tokens))
            kept = native.get(case("Compress_RazorCache_FreshKeptPages", dtype, tokens))
            p = portable.get(case("Compress_RazorCache", dtype, tokens))
            print(f"| {tokens:,} | {short[dtype]} | {reused['gbs']:.1f} | {100 * share_of_read(reused, read_case['native']):.0f}% "
                  + (f"| {fresh['gbs']:.1f} | {fresh['ms'] / reused['ms']:.2f} " if fresh else "| - | - ")
                  + (f"| {huge['gbs']:.1f} | {huge['ms'] / reused['ms']:.2f} " if huge else "| - | - ")
                  + (f"| {kept['gbs']:.1f} | {kept['ms'] / reused['ms']:.2f} " if kept else "| - | - ")
                  + (f"| {p['gbs']:.1f} |" if p else "| - |"))

    print()

    print_pairs(runs.get("pairs"), short, group_name)

    print_tuning(portable, default_tuned, dtypes, short, group_name)

    print_o2(native, at_o2, dtypes, short, group_name)

    print("Threads: decode of the GQA-4 layer in float, ms, with one core busy with another thread "
          "or not (native binary)\n")
    print_table_head("tokens:", "busy core", "one thread:", "default (OpenMP):", "vs one thread:", "thread_pool:",
                     "vs one thread:")
    for tokens, _, contended in cases_of(native, r"BM_Decode_FanOut/tokens:(\d+)/fanout:(0)/contended:(\d+)/"):
        ms = [native[f"BM_Decode_FanOut/tokens:{tokens}/fanout:{f}/contended:{contended}/real_time"]["ms"]
              for f in range(3)]
        print(f"| {tokens:,} | {'yes' if contended else 'no'} | {ms[0]:.2f} | {ms[1]:.2f} | {ms[1] / ms[0]:.2f}x "
              f"| {ms[2]:.2f} | {ms[2] / ms[0]:.2f}x |")


if __name__ == "__main__":
    main()
