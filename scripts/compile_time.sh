#!/usr/bin/env bash
# scripts/compile_time.sh: how long one engine translation unit (bench/compile_time/engine_unit.cpp:
# the umbrella header and one decode call) takes to compile, header-only and with the kernels
# compiled once (RAZORKV_SEPARATE_KERNELS, what linking razorkv::kernels sets). Median of
# RAZORKV_COMPILE_RUNS (default 3) runs each, g++ -std=c++17 -O2 -march=native.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs="${RAZORKV_COMPILE_RUNS:-3}"
unit="$root/bench/compile_time/engine_unit.cpp"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

measure() {  # measure <label> <extra flags...>: prints the median seconds and the peak memory
  local label="$1"
  shift
  local times=() peak=0
  for ((i = 0; i < runs; ++i)); do
    local start end kb
    start=$(date +%s.%N)
    if [ -x /usr/bin/time ]; then
      /usr/bin/time -f "%M" -o "$out/mem" g++ -std=c++17 -O2 -march=native -I "$root/include" \
        -I /usr/include/eigen3 "$@" -c "$unit" -o "$out/unit.o"
      kb=$(tail -1 "$out/mem")
      ((kb > peak)) && peak=$kb
    else
      g++ -std=c++17 -O2 -march=native -I "$root/include" -I /usr/include/eigen3 "$@" -c "$unit" -o "$out/unit.o"
    fi
    end=$(date +%s.%N)
    times+=("$(awk -v a="$start" -v b="$end" 'BEGIN { print b - a }')")
  done
  local median
  median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(((runs + 1) / 2))p")
  if ((peak > 0)); then
    printf '%-34s %6.2f s  %5d MB peak\n' "$label" "$median" $((peak / 1024))
  else
    printf '%-34s %6.2f s\n' "$label" "$median"
  fi
}

echo "one engine translation unit (umbrella + decode_attention), median of $runs:"
measure "header-only"
measure "kernels compiled once" -DRAZORKV_SEPARATE_KERNELS=1
