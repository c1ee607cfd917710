"""The prompts and likelihood trials razorkv_smollm2_eval writes (prompts.jsonl,
likelihood.jsonl), read and filtered as the evaluation's other runners (llama_cpp_kv.py,
kvpress_eval.py) take them: --lengths, --tasks and --needles, each a comma-separated list, empty
for all. Python's standard library only."""
import json
import sys


def add_arguments(parser) -> None:
    """The filter options every runner takes."""
    parser.add_argument("--lengths", default="", help="comma-separated token counts (all)")
    parser.add_argument("--tasks", default="", help="comma-separated task names (all)")
    parser.add_argument("--needles", default="", help="comma-separated needle kinds (all)")


def read(path: str, args, tool: str) -> list:
    """The lines of `path` that args' filters keep (a likelihood trial has no task or needle:
    only --lengths applies to it); none is an error naming the tool, the filters and the file."""
    lengths = {int(x) for x in args.lengths.split(",") if x}
    tasks = {x for x in args.tasks.split(",") if x}
    needles = {x for x in args.needles.split(",") if x}
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    kept = [p for p in lines if (not lengths or p["length"] in lengths)
            and (not tasks or "task" not in p or p["task"] in tasks)
            and (not needles or "needle" not in p or p["needle"] in needles)]
    if not kept:
        sys.exit(f"{tool}: no prompts of lengths {sorted(lengths)}, tasks {sorted(tasks)} and "
                 f"needles {sorted(needles)} in {path}")
    return kept
