#!/usr/bin/env bash
# `pip install .` as a new user runs it: a fresh virtual environment of the given interpreter,
# razorkv built by pip (pyproject.toml: scikit-build-core, pybind11 from Python's package index,
# numpy as python/constraints.txt pins it), then the module's tests run against the installed
# package from outside the source tree, and its type stubs are checked against the committed
# python/razorkv/_razorkv.pyi. With --hf, torch and transformers too
# (python/requirements-hf.txt), razorkv.hf's tests (tests/python/test_hf.py; on SmolLM2 when
# RAZORKV_SMOLLM2_GGUF names its file) and the documentation's transformers blocks (hf_*; the
# README's needs SmolLM2 in build/models, where scripts/get_model.sh puts it).
#   bash scripts/check_pip_install.sh [PYTHON (/usr/bin/python3)] [VENV (build/venv-pip)] [--hf]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

python="${1:-/usr/bin/python3}"
venv="$(realpath -m "${2:-$razorkv_root/build/venv-pip}")"  # absolute: the tests run elsewhere
hf="${3:-}"
[ -z "$hf" ] || [ "$hf" = --hf ] || razorkv_fail "unknown option '$hf' (--hf or nothing)"
razorkv_require_packages cmake g++ libeigen3-dev nlohmann-json3-dev python3-venv python3-dev
rm -rf "$venv"
"$python" -m venv "$venv" || razorkv_fail "$python cannot create the virtual environment $venv"
"$venv/bin/pip" install --quiet --constraint "$razorkv_root/python/constraints.txt" "$razorkv_root" \
  || razorkv_fail "pip install . failed in $venv"
cd "$(mktemp -d)" || razorkv_fail "no temporary folder"
"$venv/bin/python" - "$venv" <<'PY' || razorkv_fail "the installed package is not the one pip built"
import os, sys
import razorkv
where = os.path.realpath(razorkv.__file__)
assert where.startswith(os.path.realpath(sys.argv[1]) + os.sep), f"razorkv imported from {where}"
print(f"razorkv {razorkv.__version__} installed by pip at {os.path.dirname(where)}")
PY
RAZORKV_SOURCE_DIR="$razorkv_root" "$venv/bin/python" "$razorkv_root/tests/python/test_module.py" \
  || razorkv_fail "tests/python/test_module.py failed on the pip-installed package"
# The core's type stubs, as pybind11-stubgen writes them from the installed module's signatures:
# the committed ones must be these (RAZORKV_UPDATE_STUBS=1 rewrites them), and no signature may
# name a C++ type where Python's would do (--exit-code).
"$venv/bin/pip" install --quiet pybind11-stubgen==3.0.0 || razorkv_fail "pip could not install pybind11-stubgen"
stubs="$(mktemp -d)"
"$venv/bin/pybind11-stubgen" --exit-code -o "$stubs" razorkv._razorkv >/dev/null \
  || razorkv_fail "pybind11-stubgen found signatures it cannot write as Python (above)"
if [ "${RAZORKV_UPDATE_STUBS:-}" = 1 ]; then
  cp "$stubs/razorkv/_razorkv.pyi" "$razorkv_root/python/razorkv/_razorkv.pyi"
fi
diff -u "$razorkv_root/python/razorkv/_razorkv.pyi" "$stubs/razorkv/_razorkv.pyi" \
  || razorkv_fail "python/razorkv/_razorkv.pyi is not what the module's signatures give (RAZORKV_UPDATE_STUBS=1 bash scripts/check_pip_install.sh rewrites it)"
[ -n "$hf" ] || exit 0
"$venv/bin/pip" install --quiet --constraint "$razorkv_root/python/constraints.txt" \
  -r "$razorkv_root/python/requirements-hf.txt" || razorkv_fail "pip could not install torch and transformers"
RAZORKV_SOURCE_DIR="$razorkv_root" "$venv/bin/python" "$razorkv_root/tests/python/test_hf.py" \
  || razorkv_fail "tests/python/test_hf.py failed"
snippets="$(mktemp -d)"
python3 "$razorkv_root/scripts/doc_snippets.py" "$snippets" >/dev/null || razorkv_fail "doc_snippets.py failed"
for block in "$snippets"/hf_*.py; do
  [ "$(basename "$block")" != hf_readme.py ] || [ -n "${RAZORKV_SMOLLM2_GGUF:-}" ] || continue
  RAZORKV_SOURCE_DIR="$razorkv_root" "$venv/bin/python" "$block" \
    || razorkv_fail "the documentation's block $(basename "$block" .py) failed"
done
