#!/usr/bin/env bash
# scripts/check_format.sh: fails when a C++ file of the tree (tracked, or new and not ignored) is
# not formatted as .clang-format says (clang-format 14, Debian 12's), listing the files; with
# --fix it formats them instead.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v clang-format > /dev/null || { echo "razorkv: clang-format is not installed" >&2; exit 1; }
# Tracked files and new ones not yet added (so that --fix before a first commit covers them).
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.hpp' '*.cpp' '*.h' '*.cc')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "razorkv: not formatted as .clang-format says (run scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "razorkv: ${#files[@]} C++ files formatted as .clang-format says ($(clang-format --version | head -1))"
