#!/usr/bin/env bash
# `pip install .` as a new user runs it: a fresh virtual environment of the given interpreter,
# razorkv built by pip (pyproject.toml: scikit-build-core, pybind11 from Python's package index,
# numpy as python/constraints.txt pins it), then the module's tests run against the installed
# package from outside the source tree. With --hf, torch and transformers too
# (python/requirements-hf.txt) and razorkv.hf's tests (tests/python/test_hf.py; on SmolLM2
# when RAZORKV_SMOLLM2_GGUF names its file).
#   bash scripts/check_pip_install.sh [PYTHON (/usr/bin/python3)] [VENV (build/venv-pip)] [--hf]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

python="${1:-/usr/bin/python3}"
venv="${2:-$razorkv_root/build/venv-pip}"
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
[ -n "$hf" ] || exit 0
"$venv/bin/pip" install --quiet --constraint "$razorkv_root/python/constraints.txt" \
  -r "$razorkv_root/python/requirements-hf.txt" || razorkv_fail "pip could not install torch and transformers"
RAZORKV_SOURCE_DIR="$razorkv_root" "$venv/bin/python" "$razorkv_root/tests/python/test_hf.py" \
  || razorkv_fail "tests/python/test_hf.py failed"
