#!/usr/bin/env bash
# spec_cli_test.sh: `cpulm run` with speculation prints exactly what it prints without:
# greedy output across the shared models and prompts with --spec ngram, with the model
# drafting for itself, and with a draft quantized here by `cpulm quantize` (F16 -> Q4_0);
# sampled output (same seed) with n-gram drafts and under a JSON schema; `cpulm chat` over
# three turns (the draft model keeps its cache across turns); the statistics on
# stderr; usage errors (exit 2) for a draft of another vocabulary, --spec draft without
# -md and a hybrid target. Usage: spec_cli_test.sh path/to/cpulm
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
STORIES=$SHARED/models/stories260K.gguf
TINY=$SHARED/testdata/models/tiny-llama-f16.gguf
if [ ! -f "$STORIES" ] || [ ! -f "$TINY" ]; then echo "skip: shared models not found (set CPULM_SHARED)"; exit 77; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1 ${3:-}"; fi; }

"$CPULM" quantize "$TINY" "$TMP/tiny-q4_0.gguf" Q4_0 >/dev/null 2>&1
check quantize_draft $?

# same(name, model, prompt, "speculation flags", other flags...): plain vs speculative
# stdout, byte for byte (the speculation flags are split on spaces)
same() {
  local name=$1 model=$2 prompt=$3 spec=$4
  shift 4
  "$CPULM" run -m "$model" -p "$prompt" -n 64 -t 1 --ignore-eos "$@" >"$TMP/a" 2>/dev/null
  check "${name}_plain_rc" $?
  # shellcheck disable=SC2086
  "$CPULM" run -m "$model" -p "$prompt" -n 64 -t 1 --ignore-eos $spec "$@" >"$TMP/b" 2>"$TMP/err"
  check "${name}_spec_rc" $? "$(tail -2 "$TMP/err")"
  cmp -s "$TMP/a" "$TMP/b"
  check "${name}_identical" $? "$(head -c 300 "$TMP/a") /// $(head -c 300 "$TMP/b")"
  grep -q "tokens per target pass" "$TMP/err"
  check "${name}_stats" $?
}

PROMPTS=("Once upon a time" "The dog ran. The dog ran. The dog" "Lily had a red ball. Lily"
         "Tom said hi. Tom said" "x")
i=0
for p in "${PROMPTS[@]}"; do
  i=$((i + 1))
  same "ngram_stories_$i" "$STORIES" "$p" "--spec ngram" --temp 0
  same "ngram_fixed_stories_$i" "$STORIES" "$p" "--spec ngram --spec-fixed --spec-ngram-min 1" --temp 0
  same "self_draft_stories_$i" "$STORIES" "$p" "-md $STORIES --spec-fixed --draft-max 5" --temp 0
  same "q4_draft_tiny_$i" "$TINY" "$p" "-md $TMP/tiny-q4_0.gguf --spec-fixed --draft-max 4" --temp 0
  same "q4_adaptive_tiny_$i" "$TINY" "$p" "-md $TMP/tiny-q4_0.gguf" --temp 0
  same "ngram_sampled_$i" "$STORIES" "$p" "--spec ngram --spec-fixed --spec-ngram-min 1" --seed $i
done
SCHEMA='{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}'
same schema_ngram "$STORIES" "Tom" "--spec ngram --spec-fixed" --seed 7 --json-schema "$SCHEMA"
same schema_draft "$STORIES" "Tom" "-md $STORIES --spec-fixed" --seed 7 --json-schema "$SCHEMA"

# chat: three turns (and with -c 64, turns dropped as the context fills), same replies
printf 'Once upon a time\nTell me more\nAnd then?\n' >"$TMP/turns"
for c in 256 64; do
  "$CPULM" chat -m "$STORIES" -n 40 --temp 0 -t 1 -c $c <"$TMP/turns" >"$TMP/ca" 2>/dev/null
  for spec in "--spec ngram --spec-fixed --spec-ngram-min 1" "-md $STORIES --draft-max 4"; do
    # shellcheck disable=SC2086
    "$CPULM" chat -m "$STORIES" -n 40 --temp 0 -t 1 -c $c $spec <"$TMP/turns" >"$TMP/cb" 2>/dev/null
    cmp -s "$TMP/ca" "$TMP/cb"
    check "chat_c${c}_${spec%% *}" $? "$(head -c 200 "$TMP/ca") /// $(head -c 200 "$TMP/cb")"
  done
done

# the model drafting for itself greedily is always accepted: 5 drafts + 1 per pass
"$CPULM" run -m "$STORIES" -p "Once upon a time" -n 61 -t 1 --temp 0 --ignore-eos -md "$STORIES" \
  --spec-fixed --draft-max 5 2>&1 >/dev/null | grep -q "accepted 50 (100.0%), 6.00 tokens per target pass"
check self_draft_all_accepted $?

"$CPULM" run -m "$STORIES" -md "$SHARED/models/llama-2-tiny-random.gguf" -p hi -n 2 >/dev/null 2>"$TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "vocabulary has 32000 tokens" "$TMP/err"
check vocab_mismatch $? "rc=$rc $(cat "$TMP/err")"
"$CPULM" run -m "$STORIES" --spec draft -n 2 >/dev/null 2>&1
[ $? -eq 2 ]; check draft_without_model $?
"$CPULM" run -m "$STORIES" --spec ngram -md "$STORIES" -n 2 >/dev/null 2>&1
[ $? -eq 2 ]; check ngram_and_draft $?

# bench: sg rows, plain and speculative, with the speculation's figures
"$CPULM" bench -m "$STORIES" -md "$STORIES" --spec-fixed --draft-max 4 -n 16,21 -r 1 -t 1 -o json \
  >"$TMP/b.json" 2>"$TMP/err"
check bench_spec_rc $? "$(cat "$TMP/err")"
python3 - "$TMP/b.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["test"] for r in rows] == ["sg16 none", "sg16 draft", "sg21 none", "sg21 draft"], rows
for r in rows:
    assert r["kind"] == "sg" and r["n_gen"] in (16, 21) and r["avg_ts"] > 0, r
    if r["spec_type"] == "none":
        assert r["spec_drafted"] == 0 and r["spec_tokens_per_pass"] == 1, r
    else:  # the model drafting for itself: every draft accepted, 5 tokens per verification
        assert r["spec_acceptance"] == 1 and r["spec_drafted"] > 0, r
        assert r["spec_target_passes"] == 1 + (r["n_gen"] - 1 + 4) // 5, r
PY
check bench_spec_json $?
"$CPULM" bench -m "$STORIES" --spec ngram --spec-prompt "a b a b a b a b" -n 8 -r 1 -t 1 >"$TMP/b.md" 2>&1
grep -q "| sg8 ngram |" "$TMP/b.md" && grep -q "tokens/pass" "$TMP/b.md"
check bench_spec_md $? "$(cat "$TMP/b.md")"
"$CPULM" bench -m "$STORIES" --spec ngram -n 8 -r 1 -t 1 -o csv >"$TMP/b.csv" 2>&1
head -1 "$TMP/b.csv" | grep -q "spec_type,spec_acceptance,spec_tokens_per_pass" && grep -q ',ngram,' "$TMP/b.csv"
check bench_spec_csv $? "$(cat "$TMP/b.csv")"

# a hybrid model (recurrent state: rejected drafts cannot leave its cache) refuses speculation
# with a usage error instead of printing another text (it did: the target kept rejected drafts)
"$CPULM" synth --shape tiny-qwen35 --type f32 -o "$TMP/hybrid.gguf" >/dev/null 2>&1
"$CPULM" run -m "$TMP/hybrid.gguf" -p "a b a b a b" -n 8 -t 1 --spec ngram >/dev/null 2>"$TMP/err"
rc=$?
check hybrid_refused "$([ "$rc" -eq 2 ] && grep -q "recurrent state cannot" "$TMP/err"; echo $?)" "rc=$rc $(cat "$TMP/err")"

echo "spec_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
