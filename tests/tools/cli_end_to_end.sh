#!/usr/bin/env bash
# The razorkv CLI end to end on synthetic dumps: probe -> score -> select -> ratio finds the
# planted heads; bad arguments and files exit with code 2 and a one-line error on stderr.
#   cli_end_to_end.sh RAZORKV_CLI MAKE_SYNTHETIC_DUMPS WORK_DIR
set -euo pipefail
cli="$1" make_dumps="$2" dir="$3"
rm -rf "$dir" && mkdir -p "$dir"

"$cli" probe --period 64 --repeats 4 --bos 1 --vocab-max 32000 --seed 3 --out "$dir/probe.npy"
"$make_dumps" "$dir" 64 4
"$cli" score --period 64 --repeats 4 --bos 1 --probe "$dir/probe.npy" \
  --q "$dir/L0_q.npy" --k "$dir/L0_k.npy" --q "$dir/L1_q.npy" --k "$dir/L1_k.npy" \
  --q "$dir/L2_q.npy" --k "$dir/L2_k.npy" --subsample 2 --out "$dir/scores.json"
grep -q '"head_dim": 64' "$dir/scores.json"  # recorded from the dumps; select reads it
# 6 kv groups: 0.2 -> one group by induction and one by echo.
"$cli" select --scores "$dir/scores.json" --induction-ratio 0.2 --echo-ratio 0.2 \
  --format mindspore --out "$dir/plan_mindspore.json"
plan="$(cat "$dir/plan_mindspore.json")"
[ "$plan" = '{"0":[1],"2":[0]}' ] || { echo "unexpected plan: $plan" >&2; exit 1; }
"$cli" select --scores "$dir/scores.json" --induction-ratio 0.2 --echo-ratio 0.2 --head-dim 64 --out "$dir/plan.json"
grep -q '"aggregation": "sum"' "$dir/plan.json"  # the default group score, recorded in the plan
for gqa in max mean; do
  "$cli" select --scores "$dir/scores.json" --gqa "$gqa" --out "$dir/plan_$gqa.json"
  grep -q "\"aggregation\": \"$gqa\"" "$dir/plan_$gqa.json" || { echo "--gqa $gqa not recorded" >&2; exit 1; }
done
# The same from attention-probability dumps.
"$cli" score --period 64 --repeats 4 --bos 1 --kv-heads 2 --attn "$dir/L0_attn.npy" --attn "$dir/L1_attn.npy" \
  --attn "$dir/L2_attn.npy" --out "$dir/scores_attn.json"
"$cli" select --scores "$dir/scores_attn.json" --induction-ratio 0.2 --echo-ratio 0.2 --head-dim 64 \
  --format mindspore --out "$dir/plan_attn.json"
# Probabilities carry no head_dim: select must be told, not guess.
! "$cli" select --scores "$dir/scores_attn.json" --out "$dir/x.json" 2>"$dir/stderr"
grep -q "records no head_dim (scored from --attn dumps): give --head-dim" "$dir/stderr"
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
[ "$(grep -c 'stroke="red"' "$dir/heads.svg")" -eq 4 ] || { echo "expected 2 groups x 2 panels boxed" >&2; exit 1; }
# Every plan format, wherever a plan is read, and converted between them.
shape=(--layers 3 --query-heads 8 --kv-heads 2 --head-dim 64)
"$cli" convert --plan "$dir/plan.json" --to duoattention --out "$dir/plan.tsv"
[ "$(cat "$dir/plan.tsv")" = "$(printf '0\t1\n0\t0\n1\t0')" ] || { echo "unexpected TSV: $(cat "$dir/plan.tsv")" >&2; exit 1; }
"$cli" convert --plan "$dir/plan.tsv" "${shape[@]}" --to mindspore --out "$dir/from_tsv.json"
[ "$(cat "$dir/from_tsv.json")" = '{"0":[1],"2":[0]}' ] || { echo "TSV -> mindspore: $(cat "$dir/from_tsv.json")" >&2; exit 1; }
"$cli" convert --plan "$dir/from_tsv.json" "${shape[@]}" --to razorkv --out "$dir/from_mindspore.json"
"$cli" convert --plan "$dir/plan.tsv" "${shape[@]}" --sparsity 0.9 --to mindspore --out "$dir/sparse.json"
[ "$(cat "$dir/sparse.json")" = '{"0":[1]}' ] || { echo "sparsity 0.9 of 6 gates keeps 1: $(cat "$dir/sparse.json")" >&2; exit 1; }
"$cli" heatmap --scores "$dir/scores.json" --plan "$dir/plan.tsv" --out "$dir/heads_tsv.svg"
cmp -s "$dir/heads.svg" "$dir/heads_tsv.svg" || { echo "the heat map differs with the TSV plan" >&2; exit 1; }
for plan in plan.tsv from_tsv.json from_mindspore.json; do
  "$cli" ratio "${shape[@]}" --plan "$dir/$plan" --seq-len 100000 | tail -1 >"$dir/ratio_$plan.txt"
done
"$cli" ratio --plan "$dir/plan.json" --seq-len 100000 | tail -1 >"$dir/ratio_json.txt"
for plan in plan.tsv from_tsv.json from_mindspore.json; do
  cmp -s "$dir/ratio_json.txt" "$dir/ratio_$plan.txt" || { echo "ratio differs with $plan" >&2; exit 1; }
done
# Every option of every subcommand has help text: CLI11 prints it from column 31, on the option's
# line or, after a long signature, on the next.
for sub in probe score select ratio heatmap convert; do
  "$cli" "$sub" --help | awk -v cmd="$sub" '
    /^  -/ { if (pending != "") { print cmd ": " pending; bad = 1 }
             pending = (substr($0, 31) ~ /[^ ]/) ? "" : $1; next }
    substr($0, 1, 30) ~ /^ +$/ && substr($0, 31, 1) ~ /[^ ]/ { pending = "" }
    END { if (pending != "") { print cmd ": " pending; bad = 1 }; exit bad }' \
    || { echo "an option of '$sub' has no help text" >&2; exit 1; }
done
"$cli" --version | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+$'
"$cli" ratio --model llama-3-8b --retrieval-fraction 0.15 --seq-len 4096 1048576 | grep -Eq "^ +1048576 "
# 8-bit rows: 34 bytes per 32 values against 64, for windows and retrieval heads alike (0.319 of
# the 16-bit full cache at 1M tokens, times 0.531); the retrieval heads alone at 8 bits sit between.
"$cli" ratio --model llama-3-8b --retrieval-fraction 0.15 --seq-len 1048576 --storage q8 \
  | grep -Eq "^ +1048576 .* 0\.169[34] "
"$cli" ratio --model llama-3-8b --retrieval-fraction 0.15 --seq-len 1048576 --retrieval-storage q8 \
  | grep -Eq "^ +1048576 .* 0\.2(4|5)[0-9]+ "

expect_exit_2() {
  local err="$dir/stderr"
  set +e
  "$@" >/dev/null 2>"$err"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || { echo "expected exit 2, got $rc: $*" >&2; exit 1; }
  # Progress lines ("razorkv score: layer 1 of 3") may come first; the error is one line.
  [ "$(grep -vc '^razorkv score: ' "$err")" -eq 1 ] && [ "$(grep -c '^razorkv: ' "$err")" -eq 1 ] \
    || { echo "expected one error line: $*" >&2; cat "$err" >&2; exit 1; }
}
# expect_error "message" command...: exit 2 and one line on stderr holding the message.
expect_error() {
  expected="$1"
  shift
  expect_exit_2 "$@"
  grep -qF -- "$expected" "$dir/stderr" || { echo "expected '$expected': $*" >&2; cat "$dir/stderr" >&2; exit 1; }
}
expect_exit_2 "$cli" select --scores "$dir/missing.json" --out "$dir/x.json"
expect_exit_2 "$cli" probe --period 0 --vocab-max 10 --out "$dir/x.npy"
expect_exit_2 "$cli" score --period 64 --repeats 4 --q "$dir/L0_q.npy"
expect_exit_2 "$cli" score --period 64 --repeats 4 --q "$dir/probe.npy" --k "$dir/L0_k.npy" --out "$dir/x.json"
expect_exit_2 "$cli" ratio --model gpt-5 --seq-len 10
expect_exit_2 "$cli" select --scores "$dir/probe.npy" --out "$dir/x.json"
expect_exit_2 "$cli" score --period 64 --repeats 4 --bogus-option
expect_exit_2 "$cli" select --scores "$dir/scores.json" --gqa median --out "$dir/x.json"
expect_error "ratio: --seq-len (0) must be > 0" "$cli" ratio --model llama-3-8b --seq-len 0
expect_error "ratio: no model: give --model PRESET" "$cli" ratio --seq-len 10
expect_error "give all of --layers, --query-heads, --kv-heads and --head-dim" "$cli" ratio --layers 3 --seq-len 10
expect_error "kv bytes: 9223372036854775807 * 512 overflows" "$cli" ratio --model llama-3-8b --seq-len 9223372036854775807
expect_error "ratio: --storage ('q5') is not none, q8 or q4" "$cli" ratio --model llama-3-8b --seq-len 10 --storage q5
expect_error "ratio: --storage: storage.keys is q8, which needs head_dim (48)" \
  "$cli" ratio --layers 1 --query-heads 2 --kv-heads 1 --head-dim 48 --seq-len 10 --storage q8
expect_error "is a mindspore plan, which does not carry the model's shape" \
  "$cli" convert --plan "$dir/from_tsv.json" --to razorkv --out "$dir/x.json"
expect_error "select: --head-dim (128) but" "$cli" select --scores "$dir/scores.json" --head-dim 128 --out "$dir/x.json"
expect_error "score: --bos (7) but" "$cli" score --period 64 --repeats 4 --bos 7 --probe "$dir/probe.npy" \
  --q "$dir/L0_q.npy" --k "$dir/L0_k.npy" --out "$dir/x.json"
# Every file's shape is checked before the first layer is scored: no progress line.
expect_error "score: layer 1 is [" "$cli" score --period 64 --repeats 4 --bos 1 --probe "$dir/probe.npy" \
  --q "$dir/L0_q.npy" --k "$dir/L0_k.npy" --q "$dir/L1_q.npy" --k "$dir/L1_q.npy" --out "$dir/x.json"
! grep -q "layer 1 of" "$dir/stderr" || { echo "score began before checking every file" >&2; exit 1; }
expect_error "cannot open" "$cli" score --period 64 --repeats 4 --bos 1 --probe "$dir/probe.npy" \
  --q "$dir/L0_q.npy" --k "$dir/L0_k.npy" --q "$dir/L1_q.npy" --k "$dir/missing.npy" --out "$dir/x.json"
# A negative scale, a C below 1 where it is not even read, and a C below 1 before the table starts.
expect_error "score_from_queries_keys: scale (-1) must be > 0" "$cli" score --period 64 --repeats 4 --bos 1 \
  --probe "$dir/probe.npy" --q "$dir/L0_q.npy" --k "$dir/L0_k.npy" --scale -1 --out "$dir/x.json"
expect_error "select: c (0) must be >= 1" "$cli" select --scores "$dir/scores.json" --c 0 --out "$dir/x.json"
set +e
"$cli" ratio --model llama-3-8b --seq-len 10 --c 0 >"$dir/stdout" 2>"$dir/stderr"
set -e
grep -qF "ratio: c (0) must be >= 1" "$dir/stderr" && [ ! -s "$dir/stdout" ] \
  || { echo "ratio --c 0: expected the error before any output" >&2; exit 1; }
# A BOS id inside the vocabulary is never drawn among the random tokens.
"$cli" probe --period 60 --repeats 2 --bos 17 --vocab-max 64 --seed 11 --out "$dir/bos_probe.npy"
python3 - "$dir/bos_probe.npy" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
header = 10 + struct.unpack("<H", data[8:10])[0]  # npy 1.0: magic, version, header length
ids = struct.unpack("<%dq" % ((len(data) - header) // 8), data[header:])
assert len(ids) == 121 and ids[0] == 17 and ids.count(17) == 1, ids
PY
echo "razorkv CLI end to end: ok"
