#!/usr/bin/env bash
# grammar_cli_test.sh: constrained output from the command line: `cpulm run --json-schema`
# and `--grammar` / `--grammar-file` on stories260K at temperature 0.9 (the output after the
# prompt must parse and follow the schema), usage errors (exit 2) for bad grammars and
# unsupported schema keywords, and a `cpulm grammar-bench` smoke run.
# Usage: grammar_cli_test.sh path/to/cpulm
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
if [ ! -f "$MODEL" ]; then echo "skip: $MODEL not found (set CPULM_SHARED)"; exit 77; fi
if ! command -v jq >/dev/null; then echo "skip: jq is not installed"; exit 77; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1 ${3:-}"; fi; }

SCHEMA='{"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":120},"pets":{"type":"array","items":{"enum":["cat","dog"]},"maxItems":3}},"required":["name","age","pets"],"additionalProperties":false}'
for seed in 1 2 3 4 5; do
  "$CPULM" run -m "$MODEL" -p "Tom" -n 300 --temp 0.9 --seed $seed -t 1 --json-schema "$SCHEMA" 2>/dev/null >"$TMP/out"
  check "run_json_schema_rc_$seed" $?
  tail -c +4 "$TMP/out" | jq -e '(keys | sort) == ["age","name","pets"] and (.name | length) <= 12
      and (.age >= 0 and .age <= 120) and (.pets | length) <= 3 and all(.pets[]; . == "cat" or . == "dog")' >/dev/null
  check "run_json_schema_valid_$seed" $? "$(head -c 200 "$TMP/out")"
done
"$CPULM" run -m "$MODEL" -p "Q" -n 20 --temp 0.9 --seed 1 -t 1 --grammar 'root ::= " " ("yes" | "no") "."' 2>/dev/null >"$TMP/yn"
grep -qxE 'Q (yes|no)\.' "$TMP/yn"; check run_grammar $? "$(cat "$TMP/yn")"
printf 'root ::= num ("," num){2}\nnum ::= [1-9] [0-9]?\n' >"$TMP/g.gbnf"
"$CPULM" run -m "$MODEL" -p "" -n 20 --temp 0.9 --seed 2 -t 1 --grammar-file "$TMP/g.gbnf" 2>/dev/null >"$TMP/nums"
grep -qxE '[1-9][0-9]?,[1-9][0-9]?,[1-9][0-9]?' "$TMP/nums"; check run_grammar_file $? "$(cat "$TMP/nums")"

"$CPULM" run -m "$MODEL" -n 5 --json-schema '{"type":"string","not":{}}' >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "unsupported JSON schema keyword 'not'" "$TMP/err"; check run_unsupported_schema_exit2 $? "$(cat "$TMP/err")"
"$CPULM" run -m "$MODEL" -n 5 --grammar 'root ::= missing' >/dev/null 2>"$TMP/err"
[ $? -eq 2 ] && grep -q "'missing' is used but not defined" "$TMP/err"; check run_bad_grammar_exit2 $?
"$CPULM" run -m "$MODEL" -n 5 --grammar 'root ::= "a"' --json-schema '{}' >/dev/null 2>&1
[ $? -eq 2 ]; check run_two_constraints_exit2 $?

"$CPULM" grammar-bench -m "$MODEL" -n 16 -r 1 -t 1 --json >"$TMP/gb.json" 2>"$TMP/gb.err"
check grammar_bench_rc $? "$(cat "$TMP/gb.err")"
jq -e '.n_vocab == 512 and .masks == 16 and .mask_mean_ms >= 0 and .gen_ms_per_token > 0' "$TMP/gb.json" >/dev/null
check grammar_bench_json $? "$(cat "$TMP/gb.json")"

echo "grammar_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
