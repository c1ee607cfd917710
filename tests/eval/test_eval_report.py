"""tools/eval/report.py: how it merges runs, and that docs/real_model.md shows its tables.

    python3 tests/eval/test_eval_report.py tools/eval/report.py --merge
        a run repeated in a later one (a chunked-prefill run repeats every other cache on its
        prompts) is merged once; a razorkv run from before the budget column is at the default
        budget; kvpress's CSV files are gathered; the budget sweep keeps the prompts every budget
        ran and draws a line per policy; llama.cpp's likelihood rows join razorkv's; and
        tools/eval/prompts.py keeps the prompts its filters name
    python3 tests/eval/test_eval_report.py tools/eval/report.py --docs-tables DOCS.md CSV_DIR
        every table the report prints from CSV_DIR appears, row for row, in DOCS.md
Standard library only; prints "report.py: ok".
"""
import csv
import importlib.util
import io
import json
import sys
import tempfile
from contextlib import redirect_stdout
from pathlib import Path


def load_report(path: str):
    spec = importlib.util.spec_from_file_location("eval_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(path: Path, header: list, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([header] + rows)


def report_output(report, args: list) -> str:
    out = io.StringIO()
    saved = sys.argv
    sys.argv = ["report.py"] + args
    try:
        with redirect_stdout(out):
            report.main()
    finally:
        sys.argv = saved
    return out.getvalue()


def check_merge(report) -> None:
    old = ["length", "task", "needle", "depth", "rep", "policy", "query_aware", "kv_bytes",
           "full_bytes", "correct", "generated", "expected"]
    new = old[:7] + ["budget"] + old[7:]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = []
        for depth in ("0", "0.5"):
            rows += [["1024", "single", "number", depth, "0", "full", "0", "300", "300", "1", " 1", "1"],
                     ["1024", "single", "number", depth, "0", "razor", "0", "100", "300", "1", " 1", "1"]]
        write(tmp / "main/results.csv", old, rows)
        chunked = []
        for depth in ("0", "0.5"):
            chunked += [["1024", "single", "number", depth, "0", "full", "0", "0.333333", "300", "300",
                         "1", " 1", "1"],
                        ["1024", "single", "number", depth, "0", "razor chunked prefill", "0",
                         "0.333333", "100", "300", "1", " 1", "1"]]
        write(tmp / "chunked/results.csv", new, chunked)
        budget = []
        for depth in ("0", "0.5"):
            budget += [["1024", "single", "number", depth, "0", "full", "0", "0.5", "300", "300", "1", " 1", "1"],
                       ["1024", "single", "number", depth, "0", "razor", "0", "0.5", "150", "300",
                        "0" if depth == "0" else "1", " 2", "1"]]
        write(tmp / "b/results.csv", new, budget)
        press = ["length", "task", "needle", "depth", "rep", "press", "kv_fraction",
                 "attended_fraction", "seconds", "correct", "generated", "expected"]
        write(tmp / "kv/kvpress.csv", press,
              [["1024", "single", "number", "0", "0", "kvpress streaming_llm", "0.3333", "0.3333",
                "1.0", "0", " 2", "1"]])
        write(tmp / "kv/kvpress-long.csv", press,
              [["1024", "single", "number", "0.5", "0", "kvpress kvzip", "1.0000", "0.3333", "1.0",
                "1", " 1", "1"]])
        likelihood = ["length", "trial", "policy", "kv_bytes", "full_bytes", "scored", "nll", "kl",
                      "agree"]
        write(tmp / "main/likelihood.csv", likelihood,
              [["1024", "0", "full", "300", "300", "10", "20", "0", "10"],
               ["1024", "0", "razor", "100", "300", "10", "22", "0.5", "8"]])
        write(tmp / "ll/likelihood.csv", likelihood,  # llama_cpp_kv.py --likelihood's run
              [["1024", "0", "llama.cpp f16", "200", "200", "10", "20.5", "0", "10"],
               ["1024", "0", "llama.cpp q8_0", "106", "200", "10", "20.6", "0.01", "10"]])
        report.merge(tmp / "old", [tmp / "main"])  # runs from before the budget column alone
        with open(tmp / "old/results.csv", encoding="utf-8") as f:
            assert all(r["budget"] == "0.333333" for r in csv.DictReader(f)), "no default budget"
        report.merge(tmp / "out", [tmp / "main", tmp / "chunked", tmp / "b", tmp / "kv", tmp / "ll"])
        with open(tmp / "out/results.csv", encoding="utf-8") as f:
            merged = list(csv.DictReader(f))
        assert list(merged[0].keys()) == new, f"merged columns {list(merged[0].keys())}"
        policies = [(r["policy"], r["budget"], r["depth"]) for r in merged]
        assert len(policies) == len(set(policies)) == 10, f"merged rows {policies}"
        assert all(r["budget"] for r in merged), "a row without a budget"
        with open(tmp / "out/kvpress.csv", encoding="utf-8") as f:
            assert len(list(csv.DictReader(f))) == 2, "kvpress's two files were not gathered"

        text = report_output(report, [str(tmp / "figures"), str(tmp / "out")])
        assert "| razor | 100 [34, 100] (0.33) | 50 [9, 91] (0.50) |" in text, \
            "the budget sweep's razor row:\n" + text
        assert "kvpress kvzip (masks, stores all)" in text, "a masking press is not marked:\n" + text
        # Perplexity exp(22 / 10), KL 0.5 / 10, 8 of 10 positions agree; bytes as fractions.
        assert "| razor | 0.333 | 9.03 / 0.0500 / 80% |" in text, "the likelihood table:\n" + text
        assert "| llama.cpp q8_0 | 0.530 | 7.85 / 0.0010 / 100% |" in text, \
            "llama.cpp's likelihood rows were not merged:\n" + text
        assert "KL and top token from its own f16 cache" in text, "llama.cpp's reference unsaid"
        svg = (tmp / "figures/policies.svg").read_text(encoding="utf-8")
        assert svg.count("<polyline") >= 2, "the sweep draws no lines"
        assert "<polygon" in svg, "kvpress's points are missing"


def check_docs_tables(report, docs: str, csv_dir: str) -> None:
    text = report_output(report, [tempfile.mkdtemp(), csv_dir])
    page = Path(docs).read_text(encoding="utf-8")
    tables, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append(line)
        elif block:
            tables.append("\n".join(block))
            block = []
    assert tables, "the report printed no table"
    for table in tables:
        assert table in page, f"{docs} lacks this table of the report:\n{table}"


def check_prompts(path: str) -> None:
    """tools/eval/prompts.py, the filter llama_cpp_kv.py and kvpress_eval.py share."""
    spec = importlib.util.spec_from_file_location("eval_prompts", path)
    prompts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prompts)
    lines = [{"length": 1024, "task": "single", "needle": "number"},
             {"length": 1024, "task": "single", "needle": "uuid"},
             {"length": 2048, "task": "multikey", "needle": "number"},
             {"length": 2048, "trial": 0, "prefix": 2048, "ids": [1, 2]}]  # a likelihood trial
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "prompts.jsonl"
        path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")

        def kept(*options):
            import argparse
            parser = argparse.ArgumentParser()
            prompts.add_arguments(parser)
            return prompts.read(str(path), parser.parse_args(list(options)), "test")

        assert kept() == lines
        assert kept("--lengths", "2048") == lines[2:]
        assert kept("--needles", "number") == [lines[0], lines[2], lines[3]]
        assert kept("--tasks", "single", "--lengths", "1024,4096") == lines[:2]
        try:
            kept("--lengths", "999")
            raise AssertionError("no prompt kept is not an error")
        except SystemExit as e:
            assert "test: no prompts of lengths [999]" in str(e), str(e)


def main() -> None:
    report = load_report(sys.argv[1])
    if sys.argv[2] == "--merge":
        check_merge(report)
        check_prompts(str(Path(sys.argv[1]).with_name("prompts.py")))
    else:
        check_docs_tables(report, sys.argv[3], sys.argv[4])
    print("report.py: ok")


if __name__ == "__main__":
    main()
