#!/usr/bin/env python3
"""bench/report.py against a fake benchmark binary: the flags it passes to the binaries, and how it
pairs each figure with the read bandwidth of the same round.

    python3 tests/bench/test_report.py bench/report.py
"""
import os
import stat
import subprocess
import sys
import tempfile
import textwrap

# (read bandwidth, decode) GB/s of each round, by binary. Native: the median of the rounds' ratios
# is 27 / 50 = 54%; the ratio of the two medians would be 27 / 40 = 68%, and pairing no rounds at
# all could give anything between 20% and 200%. Portable: shares 50%, 80%, 60%, so over native's
# 100%, 80%, 111% round by round, median 1.00; its plain GB/s ratio is 20 / 27 = 0.74.
ROUNDS = {"razorkv_bench": [(20.0, 10.0), (40.0, 40.0), (50.0, 27.0)],
          "razorkv_bench_portable": [(40.0, 20.0), (20.0, 16.0), (50.0, 30.0)]}

FAKE = textwrap.dedent('''\
    #!{python}
    # A stand-in for a razorkv_bench binary: one round's figures per call that runs a round (the
    # first round's for report.py's kernel-label probe), in order, and its arguments logged.
    import json, os, sys
    here, name = os.path.split(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a+") as calls:
        calls.seek(0)
        call = sum(1 for line in calls.read().splitlines()
                   if line.startswith(name + " ") and "--benchmark_repetitions=1" in line.split())
        calls.write(name + " " + " ".join(sys.argv[1:]) + "\\n")
    if "--benchmark_repetitions=1" not in sys.argv:
        call = 0
    read, decode = {rounds}[name][call]
    def case(name, gbs, label=""):
        return {{"name": name, "run_name": name, "run_type": "iteration", "real_time": 1.0 / gbs,
                 "time_unit": "ms", "bytes_per_second": gbs * 1e9, "label": label}}
    print(json.dumps({{"benchmarks": [
        case("BM_MemoryRead_Sum/real_time", read),
        case("BM_Decode_Razorkv<float>/tokens:32768/group:8/real_time", decode, "avx512")]}}))
''')


def main():
    report = sys.argv[1]
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
                f.write(FAKE.format(python=sys.executable, rounds=repr(ROUNDS)))
            os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        saved = os.path.join(folder, "rounds.json")
        rounds = len(ROUNDS["razorkv_bench"])
        tables = run_report(folder, "--repetitions", str(rounds), "--min-time", "0.1", "--warmup-time", "0.05",
                            "--save-rounds", saved)
        calls_file = os.path.join(folder, "calls")
        calls = open(calls_file).read().splitlines() if os.path.exists(calls_file) else []
        again = run_report("--from-rounds", saved) if os.path.exists(saved) else ""
        calls_after = open(calls_file).read().splitlines() if os.path.exists(calls_file) else []
        neither = subprocess.run([sys.executable, report], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    round_calls = [c for c in calls if "--benchmark_repetitions=1" in c.split()]
    expect(len(round_calls) == 2 * rounds, f"one call per binary and round, got {len(round_calls)}")
    for call in round_calls:
        for flag in ("--benchmark_min_warmup_time=0.05", "--benchmark_min_time=0.1",
                     "--benchmark_enable_random_interleaving=true"):
            expect(flag in call.split(), f"{flag} missing from the call: {call}")
    expect("native run 40.0 GB/s (20.0-50.0 over the rounds)" in tables,
           "the header gives the median read bandwidth and its range over the rounds")
    expect("| 32,768 | GQA 8 | float | 27.0 | 54% | 20.0 | 0.74 | 1.00 |" in tables,
           "the dense decode's share is the median of the rounds' ratios (54%, not 68%), and the portable "
           "build's speed over native's is 0.74 in GB/s and 1.00 as shares of each one's read bandwidth")
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
