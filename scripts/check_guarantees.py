#!/usr/bin/env python3
"""Checks that every test docs/guarantees.md cites exists, so that a renamed or deleted test cannot
leave a guarantee defended by nothing.

    python3 scripts/check_guarantees.py CTEST_LIST   # CTEST_LIST: `ctest -N` of a full build

Each backticked name in a table's last column must be one of: a CTest test (GoogleTest's
`Suite.Name`, `Suite.*`, `Suite/*.Name` for typed suites; `cross.` names are the same tests built
for aarch64, found under their plain names), a test binary of tests/CMakeLists.txt, a Python test
method or class of tests/python, a fuzz target of fuzz/, or a file of the repository. A few words
of prose in that column are listed below; anything else is an error naming the row.
"""
import fnmatch
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Backticked words in the tests column that name a build setting, not a test.
PROSE = {"-O0", "RAZORKV_KERNEL_DISPATCH=OFF", "decode_reserve", "razorkv::kernels"}


def ctest_names(listing):
    names = []
    for line in listing.splitlines():
        match = re.match(r"\s*Test\s+#\d+:\s+(\S+)", line)
        if match:
            names.append(re.sub(r"<.*>$", "", match.group(1)))  # typed tests: Suite.Name<float>
    return names


def cited(path):
    """(line number, name) of every backticked name in the last column of a table row."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| claim"):
            continue
        last = re.split(r"(?<!\\)\|", line.strip())[-2]
        for name in re.findall(r"`([^`]+)`", last):
            yield number, name


def exists(name, tests, binaries, python_text):
    if name in PROSE:
        return True
    if "/" in name and (ROOT / name).is_file():
        return True
    if name.startswith("fuzz_"):
        return (ROOT / "fuzz" / (name + ".cpp")).is_file()
    if name.startswith("test_"):
        return re.search(r"def " + re.escape(name) + r"\(", python_text) is not None
    if name in binaries:
        return True
    pattern = name.replace("<set>", "*")
    if pattern.startswith("cross."):
        pattern = pattern[len("cross."):]
    pattern = re.sub(r"/\*\.", ".", pattern)  # GoogleTest's typed suite Suite/* is Suite in CTest
    if "." not in pattern and "*" in pattern:
        pattern = "*" + pattern  # `Malformed*`: tests whose names start so, in any suite
    if any(fnmatch.fnmatchcase(test, pattern) for test in tests):
        return True
    suite = name.split(".")[0]  # a Python unittest class (PagedPools.*)
    return name.endswith(".*") and re.search(r"class " + re.escape(suite) + r"\b", python_text)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tests = ctest_names(pathlib.Path(sys.argv[1]).read_text())
    if not tests:
        sys.exit(f"check_guarantees: no tests in {sys.argv[1]} (expected `ctest -N` output)")
    binaries = set(re.findall(r"razorkv_test_executable\((\w+)", (ROOT / "tests/CMakeLists.txt").read_text()))
    python_text = "\n".join(p.read_text() for p in sorted((ROOT / "tests/python").glob("*.py")))
    missing = [(n, name) for n, name in cited(ROOT / "docs/guarantees.md")
               if not exists(name, tests, binaries, python_text)]
    for number, name in missing:
        print(f"docs/guarantees.md:{number}: cites `{name}`, which no test, binary, fuzz target or "
              "file is", file=sys.stderr)
    if missing:
        sys.exit(1)
    print(f"check_guarantees: every test docs/guarantees.md cites exists ({len(tests)} in CTest)")


if __name__ == "__main__":
    main()
