#!/usr/bin/env bash
# The razorkv CLI end to end on synthetic dumps: probe -> score -> select -> ratio finds the
# planted heads; bad arguments and files exit with code 2 and a one-line error on stderr.
#   cli_end_to_end.sh RAZORKV_CLI MAKE_SYNTHETIC_DUMPS WORK_DIR
set -euo pipefail
cli="$1" make_dumps="$2" dir="$3"
rm -rf "$dir" && mkdir -p "$dir"

"$cli" probe --period 64 --repeats 4 --bos 1 --vocab-max 32000 --seed 3 --out "$dir/probe.npy"
"$make_dumps" "$dir" 64 4
"$cli" score --period 64 --repeats 4 --bos --probe "$dir/probe.npy" \
  --q "$dir/L0_q.npy" --k "$dir/L0_k.npy" --q "$dir/L1_q.npy" --k "$dir/L1_k.npy" \
  --q "$dir/L2_q.npy" --k "$dir/L2_k.npy" --subsample 2 --out "$dir/scores.json"
# 6 kv groups: 0.2 -> one group by induction and one by echo.
"$cli" select --scores "$dir/scores.json" --induction-ratio 0.2 --echo-ratio 0.2 --head-dim 64 \
  --format mindspore --out "$dir/plan_mindspore.json"
plan="$(cat "$dir/plan_mindspore.json")"
[ "$plan" = '{"0":[1],"2":[0]}' ] || { echo "unexpected plan: $plan" >&2; exit 1; }
"$cli" select --scores "$dir/scores.json" --induction-ratio 0.2 --echo-ratio 0.2 --head-dim 64 --out "$dir/plan.json"
# The same from attention-probability dumps.
"$cli" score --period 64 --repeats 4 --bos --kv-heads 2 --attn "$dir/L0_attn.npy" --attn "$dir/L1_attn.npy" \
  --attn "$dir/L2_attn.npy" --out "$dir/scores_attn.json"
"$cli" select --scores "$dir/scores_attn.json" --induction-ratio 0.2 --echo-ratio 0.2 --head-dim 64 \
  --format mindspore --out "$dir/plan_attn.json"
[ "$(cat "$dir/plan_attn.json")" = '{"0":[1],"2":[0]}' ] || { echo "unexpected plan from --attn: $(cat "$dir/plan_attn.json")" >&2; exit 1; }
"$cli" ratio --layers 3 --query-heads 8 --kv-heads 2 --head-dim 64 --plan "$dir/plan.json" --seq-len 100000 \
  | grep -Eq "^ +100000 "
# Budget mode: room for exactly one full group at 100,000 tokens (d 64, 2-byte K/V).
full=$(( 2 * 100000 * 64 * 2 )) small=$(( 2 * (4 + 1 + 20000) * 64 * 2 ))
"$cli" select --scores "$dir/scores.json" --head-dim 64 --budget-bytes $(( full + 5 * small )) --seq-len 100000 \
  --format mindspore --out "$dir/plan_budget.json" 2>"$dir/budget.log"
[ "$(cat "$dir/plan_budget.json")" = '{"0":[1]}' ] || { echo "unexpected budget plan: $(cat "$dir/plan_budget.json")" >&2; exit 1; }
grep -q "induction ratio" "$dir/budget.log"
"$cli" heatmap --scores "$dir/scores.json" --plan "$dir/plan.json" --out "$dir/heads.svg"
[ "$(grep -c 'stroke="red"' "$dir/heads.svg")" -eq 16 ] || { echo "expected 2 groups x 4 heads x 2 panels outlined" >&2; exit 1; }
"$cli" ratio --model llama-3-8b --retrieval-fraction 0.15 --seq-len 4096 1048576 | grep -Eq "^ +1048576 "

expect_exit_2() {
  local err="$dir/stderr"
  set +e
  "$@" >/dev/null 2>"$err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "expected exit 2, got $rc: $*" >&2; exit 1; }
  # Progress lines ("razorkv score: layer 1 of 3") may come first; the error is one line.
  [ "$(grep -c '^razorkv: ' "$err")" -eq 1 ] || { echo "expected one error line: $*" >&2; cat "$err" >&2; exit 1; }
}
expect_exit_2 "$cli" select --scores "$dir/missing.json" --out "$dir/x.json"
expect_exit_2 "$cli" probe --period 0 --vocab-max 10 --out "$dir/x.npy"
expect_exit_2 "$cli" score --period 64 --repeats 4 --q "$dir/L0_q.npy"
expect_exit_2 "$cli" score --period 64 --repeats 4 --q "$dir/probe.npy" --k "$dir/L0_k.npy" --out "$dir/x.json"
expect_exit_2 "$cli" ratio --model gpt-5 --seq-len 10
expect_exit_2 "$cli" select --scores "$dir/probe.npy" --out "$dir/x.json"
echo "razorkv CLI end to end: ok"
