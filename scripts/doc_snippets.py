#!/usr/bin/env python3
"""The code blocks of README.md and docs/*.md, as the test suite compiles and runs them.

Every ```cpp, ```python and ```cmake block is preceded by a marker naming its wrapper,

    <!-- snippet: NAME -->

a file tests/docs/NAME.cpp, NAME.py or NAME.cmake (a CMakeLists.txt) with one line that reads
`// @snippet` (or `# @snippet`) where the block goes: the wrapper declares what the block uses
and checks what it does. A block without a marker, a marker without a wrapper, and a wrapper no
block uses are errors. ```sh blocks must name only scripts that exist. ```text blocks are output.

    python3 scripts/doc_snippets.py OUT   writes OUT/NAME.cpp, OUT/NAME.py, OUT/NAME/CMakeLists.txt
                                          and OUT/snippets.cmake (one line per snippet)
    python3 scripts/doc_snippets.py       checks the markers only
"""
import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
WRAPPERS = ROOT / "tests" / "docs"
EXTENSION = {"cpp": ".cpp", "python": ".py", "cmake": ".cmake"}
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*([A-Za-z0-9_]+)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
SCRIPT = re.compile(r"\b((?:scripts|tools|bench|examples)/[\w./-]+\.(?:sh|py))\b")


def pages():
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def blocks(page):
    """(language, text, marker name or None, line number) for every fenced block of a page."""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        start = i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        previous = start - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = MARKER.match(lines[previous]) if previous >= 0 else None
        yield language, textwrap.dedent("\n".join(body)), marker.group(1) if marker else None, start + 1
        i += 1


def splice(wrapper, snippet):
    out = []
    found = 0
    for line in wrapper.read_text().splitlines():
        if line.strip() in ("// @snippet", "# @snippet"):
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + s if s else s for s in snippet.splitlines())
            found += 1
        else:
            out.append(line)
    if found != 1:
        raise ValueError(f"{wrapper}: needs exactly one @snippet line, has {found}")
    return "\n".join(out) + "\n"


def main():
    out_dir = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else None
    errors, snippets, used = [], [], set()
    for page in pages():
        where = page.relative_to(ROOT)
        for language, text, name, line in blocks(page):
            if language == "sh":
                for script in SCRIPT.findall(text):
                    if not (ROOT / script).exists():
                        errors.append(f"{where}:{line}: names {script}, which does not exist")
                continue
            if language not in EXTENSION:
                continue
            if name is None:
                errors.append(f"{where}:{line}: a {language} block without a "
                              "<!-- snippet: NAME --> marker (scripts/doc_snippets.py)")
                continue
            wrapper = WRAPPERS / (name + EXTENSION[language])
            if not wrapper.exists():
                errors.append(f"{where}:{line}: snippet '{name}' has no wrapper {wrapper.relative_to(ROOT)}")
                continue
            if name in used:
                errors.append(f"{where}:{line}: snippet '{name}' is used twice")
                continue
            used.add(name)
            try:
                snippets.append((language, name, splice(wrapper, text), where))
            except ValueError as e:
                errors.append(str(e))
    for wrapper in sorted(WRAPPERS.iterdir()):
        if wrapper.suffix in EXTENSION.values() and wrapper.stem not in used:
            errors.append(f"{wrapper.relative_to(ROOT)}: no block of README.md or docs/ uses it")
    for e in errors:
        print(f"doc_snippets: {e}", file=sys.stderr)
    if errors:
        return 1
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        manifest = []
        for language, name, text, where in snippets:
            if language == "cmake":
                target = out_dir / name / "CMakeLists.txt"
                target.parent.mkdir(exist_ok=True)
            else:
                target = out_dir / (name + EXTENSION[language])
            if not target.exists() or target.read_text() != text:
                target.write_text(text)
            manifest.append(f"razorkv_doc_snippet({language} {name} \"{where}\")")
        (out_dir / "snippets.cmake").write_text("\n".join(manifest) + "\n")
    print(f"doc_snippets: {len(snippets)} blocks, each with its wrapper")
    return 0


if __name__ == "__main__":
    sys.exit(main())
