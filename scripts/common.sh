# Shared by scripts/demo.sh and scripts/test.sh: installs the Debian packages a step needs
# (as root, with apt-get) when they are missing, and fails with a clear message otherwise.
set -euo pipefail

razorkv_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
razorkv_jobs="$(nproc 2>/dev/null || echo 2)"

razorkv_fail() {
  echo "razorkv: $*" >&2
  exit 1
}

razorkv_require_packages() {
  local missing=()
  local package
  for package in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$package")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || razorkv_fail "missing packages (${missing[*]}) and no apt-get to install them"
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || razorkv_fail "missing packages (${missing[*]}); run as root or install them"
    sudo="sudo"
  fi
  echo "razorkv: installing ${missing[*]}"
  # Another apt or dpkg process (unattended upgrades, a second script) may hold the locks: wait
  # for them, up to 10 minutes, instead of failing at once.
  local wait=(-o DPkg::Lock::Timeout=600)
  local tries=0
  until $sudo apt-get "${wait[@]}" update -qq; do
    tries=$((tries + 1))
    [ $tries -lt 60 ] || razorkv_fail "apt-get update failed"
    echo "razorkv: apt-get update failed (another apt holding the lock?); retrying in 10 s" >&2
    sleep 10
  done
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "${wait[@]}" install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null || razorkv_fail "apt-get install ${missing[*]} failed"
}

# razorkv_in_parallel <function> <arguments...>: calls <function> <argument> for each argument,
# razorkv_jobs of them at once; fails when any call failed (each call reports its own failure).
razorkv_in_parallel() {
  local function="$1"
  shift
  local pids=() status=0 argument pid
  for argument in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$razorkv_jobs" ]; do sleep 0.2; done
    "$function" "$argument" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || status=1
  done
  return $status
}

# razorkv_build <build dir> <target or "all"> <cmake options...>
razorkv_build() {
  local dir="$1" target="$2"
  shift 2
  cmake -S "$razorkv_root" -B "$dir" "$@" >"$dir.configure.log" 2>&1 \
    || { cat "$dir.configure.log" >&2; razorkv_fail "cmake configure of $dir failed"; }
  cmake --build "$dir" --target "$target" -j "$razorkv_jobs" || razorkv_fail "build of $dir failed"
}
