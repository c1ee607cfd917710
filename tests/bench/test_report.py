#!/usr/bin/env python3
"""bench/report.py against a fake benchmark binary: the flags it passes to the binaries, and how it
pairs each figure with the read bandwidth of the same round. With --docs-tables, instead, that the
tables of a run saved with --save-rounds are those a page shows, row for row.

    python3 tests/bench/test_report.py bench/report.py
    python3 tests/bench/test_report.py bench/report.py --docs-tables docs/benchmarks.md ROUNDS.json
"""
import os
import stat
import subprocess
import sys
import tempfile
import textwrap

# (read bandwidth, decode) GB/s of each round, by binary. Native: the median of the rounds' ratios
# is 27 / 50 = 54%; the ratio of the two medians would be 27 / 40 = 68%, and pairing no rounds at
# all could give anything between 20% and 200%. Portable over native: 20 / 27 = 0.74.
ROUNDS = {"razorkv_bench": [(20.0, 10.0), (40.0, 40.0), (50.0, 27.0)],
          "razorkv_bench_portable": [(40.0, 20.0), (20.0, 16.0), (50.0, 30.0)]}
# The decode's GB/s in each call that runs it alone (the case-by-case comparison), by binary: the
# rounds' ratios are 1.2, 0.9 and 1.0, median 1.00; the ratio of the two medians would be 0.90.
PAIRS = {"razorkv_bench": [10.0, 20.0, 40.0], "razorkv_bench_portable": [12.0, 18.0, 40.0]}

FAKE = textwrap.dedent('''\
    #!{python}
    # A stand-in for a razorkv_bench binary: one round's figures per call that runs a round (the
    # first round's for report.py's kernel-label probe), the next pair's figures per call that
    # runs the decode alone, in order, and its arguments logged.
    import json, os, sys
    here, name = os.path.split(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a+") as calls:
        calls.seek(0)
        earlier = [line for line in calls.read().splitlines() if line.startswith(name + " ")]
        call = sum(1 for line in earlier if "--benchmark_enable_random_interleaving=true" in line.split())
        pair = sum(1 for line in earlier if line.startswith(name + " --benchmark_filter=^"))
        calls.write(name + " " + " ".join(sys.argv[1:]) + "\\n")
    def case(name, gbs, label=""):
        return {{"name": name, "run_name": name, "run_type": "iteration", "real_time": 1.0 / gbs,
                 "time_unit": "ms", "bytes_per_second": gbs * 1e9, "label": label}}
    decode_case = "BM_Decode_Razorkv<float>/tokens:32768/group:8/real_time"
    if sys.argv[1] == "--benchmark_filter=^" + decode_case + "$":
        print(json.dumps({{"benchmarks": [case(decode_case, {pairs}[name][pair], "avx512")]}}))
        sys.exit(0)
    if "--benchmark_repetitions=1" not in sys.argv:
        call = 0
    read, decode = {rounds}[name][call]
    print(json.dumps({{"benchmarks": [
        case("BM_MemoryRead_Sum/real_time", read), case(decode_case, decode, "avx512")]}}))
''')


def check_docs_tables(report, page, rounds):
    """Every table row that report.py prints from the saved rounds is on the page."""
    result = subprocess.run([sys.executable, report, "--from-rounds", rounds], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    rows = [line for line in result.stdout.splitlines() if line.startswith("|")]
    shown = set(open(page).read().splitlines())
    missing = [row for row in rows if row not in shown]
    failures = [f"report.py --from-rounds {rounds} exited with {result.returncode}: {result.stderr}"] \
        if result.returncode != 0 else []
    failures += [f"{page} lacks the row {row}" for row in missing]
    if not rows:
        failures.append(f"report.py printed no table from {rounds}")
    for failure in failures:
        print("FAILED:", failure)
    print(f"{len(rows)} rows checked")
    print("report.py: ok" if not failures else f"report.py: {len(failures)} failure(s)")
    return 1 if failures else 0


def main():
    report = sys.argv[1]
    if len(sys.argv) == 5 and sys.argv[2] == "--docs-tables":
        return check_docs_tables(report, sys.argv[3], sys.argv[4])
    failures = []

    def expect(condition, what):
        if not condition:
            failures.append(what)

    def run_report(*args):
        result = subprocess.run([sys.executable, report, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        print(result.stdout)
        expect(result.returncode == 0, f"report.py {' '.join(args)} exited with {result.returncode}: "
                                       f"{result.stderr}")
        return result.stdout

    with tempfile.TemporaryDirectory() as folder:
        for name in ROUNDS:
            fake = os.path.join(folder, name)
            with open(fake, "w") as f:
                f.write(FAKE.format(python=sys.executable, rounds=repr(ROUNDS), pairs=repr(PAIRS)))
            os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        saved = os.path.join(folder, "rounds.json")
        rounds = len(ROUNDS["razorkv_bench"])
        tables = run_report(folder, "--repetitions", str(rounds), "--min-time", "0.1", "--warmup-time", "0.05",
                            "--paired-rounds", str(rounds), "--save-rounds", saved)
        calls_file = os.path.join(folder, "calls")
        calls = open(calls_file).read().splitlines() if os.path.exists(calls_file) else []
        again = run_report("--from-rounds", saved) if os.path.exists(saved) else ""
        calls_after = open(calls_file).read().splitlines() if os.path.exists(calls_file) else []
        neither = subprocess.run([sys.executable, report], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    round_calls = [c for c in calls if "--benchmark_enable_random_interleaving=true" in c.split()]
    pair_calls = [c for c in calls if " --benchmark_filter=^" in c]
    expect(len(round_calls) == 2 * rounds, f"one call per binary and round, got {len(round_calls)}")
    expect([c.split()[0] for c in pair_calls] == ["razorkv_bench", "razorkv_bench_portable",
                                                  "razorkv_bench_portable", "razorkv_bench",
                                                  "razorkv_bench", "razorkv_bench_portable"],
           "the case-by-case comparison runs the decode once per binary and round, back to back, the "
           f"first of the two alternating: {[c.split()[0] for c in pair_calls]}")
    for call in round_calls + pair_calls:
        for flag in ("--benchmark_min_warmup_time=0.05", "--benchmark_min_time=0.1",
                     "--benchmark_repetitions=1"):
            expect(flag in call.split(), f"{flag} missing from the call: {call}")
    expect("native run 40.0 GB/s (20.0-50.0 over the rounds)" in tables,
           "the header gives the median read bandwidth and its range over the rounds")
    expect("| 32,768 | GQA 8 | float | 27.0 | 54% | 20.0 | 0.74 |" in tables,
           "the dense decode's share is the median of the rounds' ratios (54%), not 68%")
    expect("| decode | 32,768 | GQA 8 | float | 1.00 | 0.90-1.20 |" in tables
           and "Within 10% of native: 1 of 1 cases." in tables,
           "case by case, portable over native is the median of the rounds' ratios (1.00, not 0.90)")
    expect(again == tables, "--from-rounds prints the tables of the saved run")
    expect(calls_after == calls, "--from-rounds runs no binary")
    expect(neither.returncode != 0 and "--from-rounds" in neither.stderr,
           "without bench_dir or --from-rounds, report.py says it needs one")
    for failure in failures:
        print("FAILED:", failure)
    print("report.py: ok" if not failures else f"report.py: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
