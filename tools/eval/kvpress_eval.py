"""kvpress's presses on razorkv's long-context prompts, run by kvpress's own pipeline, scored the same way.

    python kvpress_eval.py MODEL.gguf PROMPTS.jsonl OUT.csv [--lengths 1024,2048]
        [--tasks single] [--needles number] [--presses full,streaming_llm,snapkv,...]
        [--keep 0.3333] [--heldout examples/engine/smollm2/heldout.txt]

transformers loads SmolLM2 from the same GGUF file as razorkv's engine (dequantised to float32)
and saves it once as a Hugging Face folder beside the output (KVzip and DuoAttention look the
tokenizer up by the model's path). Each prompt's document (its first document_tokens ids) is
prefilled under the press, which compresses it to `keep` of its K/V; the question is then read
and the answer generated greedily by kvpress's pipeline (KVPressTextGenerationPipeline._forward),
which stops at any control token here, as razorkv's evaluation does. A single-line answer is cut
at its first newline after its first letter or digit, as razorkv's and llama_cpp_kv.py's are, and
scored whole: every expected string must appear in it.

DuoAttention's on-the-fly scoring reads 50 BookSum chapters from the Hugging Face hub, which this
machine cannot reach; it reads 50 passages of the held-out text instead (the text razorkv's
prompts draw their documents from), an adaptation marked "on held-out text" in the output. Its streaming heads keep 128 sinks and 256
recent tokens and it *masks* the rest rather than freeing it: kv_fraction is what it stores (1.0),
attended_fraction what its heads read. Its head ratio is chosen per length so that the attended
fraction equals `keep`; below about 580 document tokens that is impossible and it is skipped.
"""
import argparse
import csv
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TQDM_DISABLE", "1")

import gguf  # noqa: E402
import pandas  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import kvpress  # noqa: E402
from kvpress.presses import duo_attention_press  # noqa: E402

import prompts as prompts_file  # noqa: E402  (tools/eval/prompts.py)

DUO_SINKS, DUO_RECENT = 128, 256  # what kvpress's on-the-fly DuoAttention keeps in streaming heads


def hf_folder(model_path: str, out_dir: str) -> str:
    """The GGUF file as a Hugging Face folder (weights in float32, tokenizer), made once."""
    folder = os.path.join(out_dir, "smollm2-hf")
    if not os.path.exists(os.path.join(folder, "config.json")):
        directory, name = os.path.split(os.path.abspath(model_path))
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder


def control_tokens(model_path: str) -> list[int]:
    """The ids the GGUF marks as control tokens (razorkv's engine ends an answer at any of them)."""
    reader = gguf.GGUFReader(model_path)
    field = reader.fields["tokenizer.ggml.token_type"]
    types = [int(field.parts[i][0]) for i in field.data]
    return [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL]


def heldout_passages(path: str, count: int = 50, chars: int = 6000) -> list[str]:
    """`count` passages of the held-out text, evenly spaced, for DuoAttention's head scoring."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    step = max(1, (len(text) - chars) // count)
    return [text[i * step:i * step + chars] for i in range(count)]


def single_line(text: str) -> str:
    """The answer up to and including its first newline after its first letter or digit."""
    for i, c in enumerate(text):
        if c.isalnum():
            cut = text.find("\n", i + 1)
            return text if cut < 0 else text[:cut + 1]
    return text


def make_press(name: str, keep: float, document_tokens: int):
    """kvpress's press called `name`, compressing a document to `keep` of its K/V: None for the
    full cache, "skip" where the press cannot reach `keep` (DuoAttention on a short document)."""
    ratio = 1.0 - keep
    if name == "full":
        return None
    if name == "streaming_llm":
        return kvpress.StreamingLLMPress(compression_ratio=ratio)
    if name == "snapkv":
        return kvpress.SnapKVPress(compression_ratio=ratio)
    if name == "expected_attention":
        return kvpress.ExpectedAttentionPress(compression_ratio=ratio)
    if name == "kvzip":
        return kvpress.KVzipPress(compression_ratio=ratio)
    if name == "duo_attention":
        streamed = 1.0 - (DUO_SINKS + DUO_RECENT) / document_tokens
        heads = ratio / streamed if streamed > 0 else 2.0
        if heads > 1.0:
            return "skip"
        return kvpress.DuoAttentionPress(head_compression_ratio=heads, on_the_fly_scoring=True)
    raise ValueError(f"kvpress_eval.py: --presses: {name!r} is not one of {', '.join(PRESSES)}")


PRESSES = ("full", "streaming_llm", "snapkv", "expected_attention", "kvzip", "duo_attention")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("prompts")
    parser.add_argument("out")
    prompts_file.add_arguments(parser)
    parser.add_argument("--presses", default=",".join(PRESSES))
    parser.add_argument("--keep", type=float, default=1.0 / 3.0,
                        help="fraction of the document's K/V each press keeps (razorkv's budget)")
    parser.add_argument("--heldout", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                          "examples/engine/smollm2/heldout.txt"))
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not 0.0 < args.keep <= 1.0:
        sys.exit(f"kvpress_eval.py: --keep ({args.keep}) must be in (0, 1]")
    presses = [p for p in args.presses.split(",") if p]
    for p in presses:
        if p not in PRESSES:
            sys.exit(f"kvpress_eval.py: --presses: {p!r} is not one of {', '.join(PRESSES)}")
    prompts = prompts_file.read(args.prompts, args, "kvpress_eval.py")

    torch.set_num_threads(args.threads)
    passages = heldout_passages(args.heldout)
    duo_attention_press.load_dataset = lambda *a, **k: type(
        "Passages", (), {"to_pandas": lambda self: pandas.DataFrame({"chapter": passages})})()
    start = time.time()
    folder = hf_folder(args.model, os.path.dirname(os.path.abspath(args.out)))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model.generation_config.eos_token_id = control_tokens(args.model)
    pipe = kvpress.KVPressTextGenerationPipeline(model=model, tokenizer=tokenizer)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: model ready in "
          f"{time.time() - start:.0f} s", flush=True)

    layers = model.config.num_hidden_layers
    with open(args.out, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["length", "task", "needle", "depth", "rep", "press", "kv_fraction",
                         "attended_fraction", "seconds", "correct", "generated", "expected"])
        for name in presses:
            for p in prompts:
                doc = p["document_tokens"]
                press = make_press(name, args.keep, doc)
                if press == "skip":
                    continue
                ids = torch.tensor([p["ids"]], dtype=torch.long)
                inputs = {"context_ids": ids[:, :doc], "questions_ids": [ids[:, doc:]]}
                cache = transformers.DynamicCache()
                t = time.time()
                with torch.inference_mode():
                    answer = pipe._forward(inputs, max_new_tokens=p["max_answer_tokens"],
                                           press=press, cache=cache)[0]
                seconds = time.time() - t
                # The pipeline cuts the answer back out of the cache: what is left is what the
                # press stored of the document. KVzip and DuoAttention store it all and mask.
                kv_fraction = sum(cache.get_seq_length(i) for i in range(layers)) / (layers * doc)
                attended = kv_fraction
                if name in ("kvzip", "duo_attention"):
                    attended = 1.0 - press.compression_ratio
                text = single_line(answer) if p["single_line"] else answer
                correct = all(e in text for e in p["expected"])
                label = f"kvpress {name}" + (" on held-out text" if name == "duo_attention" else "")
                writer.writerow([p["length"], p["task"], p["needle"], p["depth"], p["rep"], label, f"{kv_fraction:.4f}", f"{attended:.4f}",
                                 f"{seconds:.1f}", int(correct), text, "|".join(p["expected"])])
                out.flush()
                print(f"{name} {p['length']} {p['task']} {p['needle']} {p['depth']}: "
                      f"{int(correct)} {text!r} kept {kv_fraction:.3f} ({seconds:.1f} s, "
                      f"{time.time() - start:.0f} s)", flush=True)
    print(f"wrote {args.out} in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
