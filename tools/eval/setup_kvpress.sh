#!/usr/bin/env bash
# Creates build/venv-kvpress with tools/eval/requirements-kvpress.txt (kvpress, torch,
# transformers: about 4.8 GB and a few minutes from Python's package index). The evaluation's
# comparison with kvpress runs in it; nothing in CI does.
#   bash tools/eval/setup_kvpress.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"

razorkv_require_packages python3 python3-venv
venv="$razorkv_root/build/venv-kvpress"
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv" || razorkv_fail "cannot create $venv"
fi
"$venv/bin/pip" install --quiet -r "$razorkv_root/tools/eval/requirements-kvpress.txt" \
  || razorkv_fail "pip install -r tools/eval/requirements-kvpress.txt failed"
