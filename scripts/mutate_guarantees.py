#!/usr/bin/env python3
"""Mutation testing of docs/guarantees.md: for each guarantee, one-line mutations of the code that
keeps it; a mutation is killed when a test of the binaries named fails. On demand, not in CI (each
mutation rebuilds its test binaries: about a minute apiece on two cores).

    python3 scripts/mutate_guarantees.py [--tests-from COMMIT] [--build DIR]

--tests-from runs the same mutations of this tree's code against the tests of another commit
(the suite before a change, to compare scores). Prints one line per mutation and the score; the
tree is restored after each mutation, and on interruption.
"""
import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (guarantee, file, text, mutated text, the test binaries that should kill it, GoogleTest filter)
MUTATIONS = [
    ("a failed copy assignment changes nothing", "include/razorkv/cache/skeleton.hpp",
     "if (this != &other) *this = cache_skeleton(other);",
     "if (this != &other) layers_ = other.layers_;",
     ("razorkv_cache_tests", "razorkv_compress_tests", "razorkv_policies_tests"), "*"),
    ("a failed append changes nothing (razor)", "include/razorkv/compress/razor_cache.hpp",
     "const detail::column_sums_fn<T> sum_columns = detail::column_sums_kernel<T>();  // may throw\n"
     "\n    // Phase 1, which may throw: the blocks growing heads need",
     "const detail::column_sums_fn<T> sum_columns = detail::column_sums_kernel<T>();  // may throw\n"
     "    l.tokens = total;\n    // Phase 1, which may throw: the blocks growing heads need",
     ("razorkv_cache_tests", "razorkv_compress_tests"), "*"),
    ("a failed append changes nothing (SnapKV)", "include/razorkv/policies/selected_cache.hpp",
     "    const index_t total = detail::checked_add(l.tokens, added, \"selected_kv_cache::append: tokens\");\n",
     "    const index_t total = detail::checked_add(l.tokens, added, \"selected_kv_cache::append: tokens\");\n"
     "    l.tokens = total;\n",
     ("razorkv_cache_tests", "razorkv_policies_tests"), "*"),
    ("thread_pool::run returns once every task has finished", "include/razorkv/core/thread_pool.hpp",
     "while (done_.load(std::memory_order_acquire) < count) std::this_thread::yield();",
     "(void)count;",
     ("razorkv_decode_tests",), "ThreadPool.*:ThreadedDecode.*"),
    ("restore_state: dropped tokens follow the window and mode", "include/razorkv/compress/razor_state.hpp",
     "head.dropped = r.count(\"a head's dropped tokens\", dropped, dropped);",
     "head.dropped = r.count(\"a head's dropped tokens\", 0, l.tokens);",
     ("razorkv_compress_tests",), "RazorkvRazorState.*:RazorkvChunkedPrefill*"),
    ("restore_state: no sums on a head that dropped nothing", "include/razorkv/compress/razor_state.hpp",
     "          if (head.dropped == 0) {", "          if (false) {",
     ("razorkv_compress_tests",), "RazorkvRazorState.*:RazorkvChunkedPrefill*"),
    ("restore_state: a small state allocates little by default", "include/razorkv/compress/razor_state.hpp",
     "options.max_bytes.value_or(default_max_bytes(size))",
     "options.max_bytes.value_or(std::numeric_limits<index_t>::max())",
     ("razorkv_compress_tests",), "RazorkvRazorState.*"),
    ("a failed decode leaves the caller's weights", "include/razorkv/attention/decode_schedule.hpp",
     "weights->reserve(tokens, num_query_heads, work.entries.data(), num_kv_heads);",
     "weights->reset(tokens, num_query_heads, work.entries.data(), num_kv_heads);",
     ("razorkv_allocation_tests", "razorkv_decode_tests"), "*"),
    ("kv_bytes_after counts what k more tokens make", "include/razorkv/compress/razor_cache.hpp",
     "      if (!l.compressed) continue;  // a cleared layer keeps its heads' buffers, not its tokens\n",
     "",
     ("razorkv_compress_tests",), "RazorkvRazorCachePlanning.*"),
    ("checked compression names double values whose sums could overflow",
     "include/razorkv/compress/razor_cache.hpp",
     "std::abs((*rows)(r, c)) <= kLargestSummable", "true",
     ("razorkv_compress_tests",), "RazorkvRazorCheckedMode.*"),
    ("a plan's shape is capped before anything is allocated", "include/razorkv/core/head_plan.hpp",
     "heads <= kMaxModelCells && layers <= kMaxModelCells / heads", "true",
     ("razorkv_select_tests",), "*"),
]


def run(cmd, cwd, log):
    return subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT).returncode


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests-from", help="a commit whose tests/ to run instead of this tree's")
    parser.add_argument("--build", default=str(ROOT / "build" / "mutants"))
    args = parser.parse_args()

    tree = ROOT
    scratch = None
    if args.tests_from:  # a copy of this tree with another commit's tests
        scratch = pathlib.Path(tempfile.mkdtemp(prefix="razorkv-mutants-"))
        tree = scratch / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), "HEAD"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for sub in ("include", "scripts", "python", "CMakeLists.txt", "cmake", "src"):
            src, dst = ROOT / sub, tree / sub
            if src.is_dir():
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src, dst)
            elif src.exists():
                shutil.copy2(src, dst)
        shutil.rmtree(tree / "tests")
        subprocess.run(f"git -C {ROOT} archive {args.tests_from} tests | tar -x -C {tree}",
                       shell=True, check=True)
    build = pathlib.Path(args.build)
    build.mkdir(parents=True, exist_ok=True)
    (build / "CMakeCache.txt").unlink(missing_ok=True)  # the tree may be another copy each run
    log = open(build / "mutants.log", "w")
    killed = 0
    try:
        if run(["cmake", "-S", str(tree), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                "-DCMAKE_CXX_FLAGS_RELEASE=-O1", "-DRAZORKV_BUILD_TESTS=ON",
                "-DRAZORKV_BUILD_BENCHMARKS=OFF", "-DRAZORKV_BUILD_EXAMPLES=OFF",
                "-DRAZORKV_BUILD_TOOLS=OFF"], tree, log) != 0:
            sys.exit(f"mutate_guarantees: cmake failed (see {build}/mutants.log)")
        for guarantee, file, text, mutated, targets, test_filter in MUTATIONS:
            path = tree / file
            original = path.read_text()
            if original.count(text) != 1:
                sys.exit(f"mutate_guarantees: {file} no longer holds the text of '{guarantee}' once")
            path.write_text(original.replace(text, mutated))
            try:
                built = run(["cmake", "--build", str(build), "--target", *targets, "-j", "2"],
                            tree, log)
                failed = built != 0 or any(
                    run([str(build / "tests" / target), "--gtest_brief=1",
                         f"--gtest_filter={test_filter}"], tree, log) != 0 for target in targets)
            finally:
                path.write_text(original)
            killed += failed
            print(f"{'killed  ' if failed else 'SURVIVED'}  {guarantee}"
                  f"{' (did not build)' if built != 0 else ''}", flush=True)
    finally:
        if scratch is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"mutation score: {killed} of {len(MUTATIONS)} killed")


if __name__ == "__main__":
    main()
