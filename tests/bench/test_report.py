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

# (read bandwidth, decode) GB/s of each round. The median of the rounds' ratios is 27 / 50 = 54%;
# the ratio of the two medians would be 27 / 40 = 68%, and pairing no rounds at all could give
# anything between 20% and 200%.
ROUNDS = [(20.0, 10.0), (40.0, 40.0), (50.0, 27.0)]

FAKE = textwrap.dedent('''\
    #!{python}
    # A stand-in for razorkv_bench: one round's figures per call, in order, and its arguments logged.
    import json, os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a+") as calls:
        calls.seek(0)
        call = len(calls.read().splitlines())
        calls.write(" ".join(sys.argv[1:]) + "\\n")
    read, decode = {rounds}[call]
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
    with tempfile.TemporaryDirectory() as folder:
        fake = os.path.join(folder, "razorkv_bench")
        with open(fake, "w") as f:
            f.write(FAKE.format(python=sys.executable, rounds=repr(ROUNDS)))
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        result = subprocess.run([sys.executable, report, folder, "--repetitions", str(len(ROUNDS)),
                                 "--min-time", "0.1", "--warmup-time", "0.05"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        calls_file = os.path.join(folder, "calls")
        calls = open(calls_file).read().splitlines() if os.path.exists(calls_file) else []
    print(result.stdout)
    if result.returncode != 0:
        failures.append(f"report.py exited with {result.returncode}: {result.stderr}")

    def expect(condition, what):
        if not condition:
            failures.append(what)

    expect(len(calls) == len(ROUNDS), f"one call per round, got {len(calls)}")
    for call in calls:
        for flag in ("--benchmark_min_warmup_time=0.05", "--benchmark_min_time=0.1",
                     "--benchmark_repetitions=1", "--benchmark_enable_random_interleaving=true"):
            expect(flag in call.split(), f"{flag} missing from the call: {call}")
    expect("native run 40.0 GB/s (20.0-50.0 over the rounds)" in result.stdout,
           "the header gives the median read bandwidth and its range over the rounds")
    expect("| 32,768 | GQA 8 | float | 27.0 | 54% |" in result.stdout,
           "the dense decode's share is the median of the rounds' ratios (54%), not 68%")
    for failure in failures:
        print("FAILED:", failure)
    print("report.py: ok" if not failures else f"report.py: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
