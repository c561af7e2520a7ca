#!/usr/bin/env bash
# spec_server_test.sh: speculative decoding in `cpulm serve` through HTTP on stories260K.
# Three servers with 8 slots (plain, --spec ngram, -md with the model drafting for itself)
# get the same 8 concurrent requests: greedy and seeded sampled texts are byte-identical;
# a stream and a grammar give the same text; /metrics carries vLLM's spec_decode counters (absent
# without speculation); /completion's timings and the OpenAI responses carry draft_n and
# draft_n_accepted; "speculative.n_max": 0 opts a request out; usage errors (exit 2) and a
# draft of another vocabulary (exit 1) are refused clearly.
# Usage: spec_server_test.sh path/to/cpulm. Servers bind 127.0.0.1 on a free port; the
# script kills only the PIDs it started; every wait loop is bounded.
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
OTHER=$SHARED/models/llama-2-tiny-random.gguf
. "$(dirname "$0")/lib.sh"
need_file "$MODEL"
need_tools curl jq

# start_server NAME ARGS...: sets PORT_<NAME>; waits (bounded) for /ready.
start_server() {
  local name=$1
  shift
  lib_serve "$name" "$MODEL" -np 8 -t 1 "$@" || return 1
  eval "PORT_$name=$PORT"
}

start_server plain; check plain_ready $?
start_server ngram --spec ngram --spec-fixed --draft-max 6; check ngram_ready $?
start_server draft -md "$MODEL" --spec-fixed --draft-max 4; check draft_ready $?
grep -q "speculative decoding: ngram, draft-max 6, fixed length" "$TMP/ngram.err"
check ngram_logged $?

# Prompts whose stories repeat, so n-grams match.
PROMPTS=(
  "Once upon a time, there was a little girl named Lily. Lily liked to play. Lily"
  "The little dog ran to the park. The little dog"
  "Tom and Sam went to the park. Tom and Sam"
  "She saw a big red ball. She saw a big red"
  "One day, a girl named Lily went to the park. One day, a girl named"
  "The sun was hot. The sun was"
  "He wanted to play with his toy. He wanted to play with"
  "There was a cat. The cat was sad. The cat"
)

# burst NAME TAG EXTRA_JSON: the 8 prompts at once to server NAME; texts in $TMP/TAG.NAME.i
burst() {
  local name=$1 tag=$2 extra=$3 port
  port=$(eval echo "\$PORT_$1")
  local pids=()
  for i in "${!PROMPTS[@]}"; do
    jq -n --arg p "${PROMPTS[$i]}" --argjson i "$i" "{prompt: \$p, max_tokens: 64} + $extra" |
      curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d @- >"$TMP/$tag.$name.$i.json" &
    pids+=("$!")
  done
  wait "${pids[@]}"
  for i in "${!PROMPTS[@]}"; do
    jq -r '.choices[0].text' "$TMP/$tag.$name.$i.json" >"$TMP/$tag.$name.$i"
  done
}

for tag in greedy sampled; do
  extra='{temperature: 0}'
  [ $tag = sampled ] && extra='{temperature: 0.8, seed: (42 + $i)}'
  for name in plain ngram draft; do burst $name $tag "$extra"; done
  for name in ngram draft; do
    same=0
    for i in "${!PROMPTS[@]}"; do
      [ -s "$TMP/$tag.plain.$i" ] && cmp -s "$TMP/$tag.plain.$i" "$TMP/$tag.$name.$i" || {
        same=1
        echo "  $tag $name prompt $i: plain '$(cat "$TMP/$tag.plain.$i")' vs '$(cat "$TMP/$tag.$name.$i")'"
      }
    done
    check "${tag}_${name}_equals_plain" $same
  done
done

# a grammar (masked sampling, its state advanced token by token) with drafts: same text
gbnf='root ::= ("Lily " | "the dog " | "ran " | "to the park. ")+'
for name in plain ngram draft; do
  port=$(eval echo "\$PORT_$name")
  jq -n --arg g "$gbnf" --arg p "${PROMPTS[0]}" \
    '{prompt: $p, max_tokens: 48, temperature: 0, grammar: $g}' |
    curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -d @- >"$TMP/gram.$name.json"
  jq -r '.choices[0].text' "$TMP/gram.$name.json" >"$TMP/gram.$name"
done
[ -s "$TMP/gram.plain" ] && grep -q "Lily\|the dog\|ran" "$TMP/gram.plain"
check grammar_plain_ran $? "$(head -c 300 "$TMP/gram.plain.json")"
cmp -s "$TMP/gram.plain" "$TMP/gram.ngram"; check grammar_ngram_equals_plain $?
cmp -s "$TMP/gram.plain" "$TMP/gram.draft"; check grammar_draft_equals_plain $?
jq -e '.timings.draft_n > 0' "$TMP/gram.ngram.json" >/dev/null; check grammar_ngram_drafted $?

# the responses report their drafts (llama-server's timings.draft_n / draft_n_accepted)
drafted=0
for i in "${!PROMPTS[@]}"; do
  n=$(jq '.timings.draft_n // 0' "$TMP/greedy.ngram.$i.json")
  a=$(jq '.timings.draft_n_accepted // 0' "$TMP/greedy.ngram.$i.json")
  [ "$a" -le "$n" ] || drafted=-1000
  drafted=$((drafted + n))
done
[ $drafted -gt 0 ]; check oai_timings_draft_n $? "($drafted)"
jq -e '.timings == null' "$TMP/greedy.plain.0.json" >/dev/null; check plain_no_timings $?

# a stream gives the same text
curl -s -N "http://127.0.0.1:$PORT_ngram/v1/completions" -H 'Content-Type: application/json' \
  -d "$(jq -n --arg p "${PROMPTS[1]}" '{prompt: $p, max_tokens: 64, temperature: 0, stream: true}')" |
  sed -n 's/^data: //p' | grep -v '^\[DONE\]' | jq -j '.choices[0].text // ""' >"$TMP/stream"
[ -s "$TMP/stream" ] && [ "$(cat "$TMP/stream")" = "$(cat "$TMP/greedy.plain.1")" ]; check stream_equals_plain $?

# /completion (llama-server's route): timings with draft_n; speculative.n_max 0 opts out
body=$(jq -n --arg p "${PROMPTS[1]}" '{prompt: $p, n_predict: 48, temperature: 0}')
curl -s "http://127.0.0.1:$PORT_ngram/completion" -d "$body" >"$TMP/native.json"
jq -e '.timings.draft_n > 0 and .timings.draft_n_accepted <= .timings.draft_n' \
  "$TMP/native.json" >/dev/null
check native_timings_draft_n $?
curl -s "http://127.0.0.1:$PORT_ngram/completion" -d "$(echo "$body" | jq '. + {"speculative.n_max": 0}')" \
  >"$TMP/optout.json"
jq -e '.timings.draft_n == null and .tokens_predicted == 48' "$TMP/optout.json" >/dev/null
check request_opt_out $?
[ "$(jq -r .content "$TMP/optout.json")" = "$(jq -r .content "$TMP/native.json")" ]
check opt_out_same_text $?
code=$(curl -s -o "$TMP/bad.json" -w '%{http_code}' "http://127.0.0.1:$PORT_ngram/v1/completions" \
  -d '{"prompt":"x","speculative.n_max":-3}')
[ "$code" = 400 ] && jq -e '.error.param == "speculative"' "$TMP/bad.json" >/dev/null
check bad_n_max_400 $?

# /completion's timings are the scheduler's: a short reply whose events reach the I/O thread
# in one go (8 tokens in two or three steps) still reports its generation time, at least the
# inter-token latencies the scheduler observed for it (vLLM's time_per_output_token sum) and
# not much more (it was ~0.01 ms: the I/O thread's first-text time)
itl_sum() { curl -s "http://127.0.0.1:$PORT_draft/metrics" |
  sed -n 's/^vllm:time_per_output_token_seconds_sum{model_name="stories260K"} //p'; }
tbad=0
for i in 1 2 3 4 5; do
  a=$(itl_sum)
  curl -s "http://127.0.0.1:$PORT_draft/completion" \
    -d '{"prompt":"Once upon a time","n_predict":8,"temperature":0}' >"$TMP/tm.json"
  b=$(itl_sum)
  pm=$(jq '.timings.predicted_ms' "$TMP/tm.json")
  awk -v a="$a" -v b="$b" -v p="$pm" 'BEGIN { d = (b - a) * 1000; exit !(d > 0 && p >= 0.9 * d && p <= d + 50) }' ||
    { tbad=1; echo "  predicted_ms $pm, inter-token latencies $(awk -v a="$a" -v b="$b" 'BEGIN { print (b - a) * 1000 }') ms"; }
done
check native_predicted_ms_from_scheduler $tbad
# /props and /slots say what speculation the server does (llama-server's keys, and cpulm's
# whole setup under "speculative")
curl -s "http://127.0.0.1:$PORT_draft/props" | jq -e '.default_generation_settings.speculative == true and
    .default_generation_settings.params["speculative.n_max"] == 4 and
    .speculative.type == "draft" and .speculative.draft_max == 4 and .speculative.adaptive == false and
    (.speculative.draft_model | endswith("stories260K.gguf"))' >/dev/null
check props_speculation_draft $?
curl -s "http://127.0.0.1:$PORT_ngram/props" | jq -e '.speculative.type == "ngram" and .speculative.draft_max == 6 and
    .speculative.draft_model == null and .default_generation_settings.params["speculative.n_max"] == 6' >/dev/null
check props_speculation_ngram $?
curl -s "http://127.0.0.1:$PORT_plain/props" | jq -e '.default_generation_settings.speculative == false and
    .speculative == {"type": "none"} and .default_generation_settings.params["speculative.n_max"] == 0' >/dev/null
check props_speculation_off $?
curl -s "http://127.0.0.1:$PORT_ngram/slots" | jq -e 'length == 8 and all(.[]; .speculative == true)' >/dev/null
check slots_speculative $?

# /metrics: vLLM's names, counts that add up; none on the plain server
curl -s "http://127.0.0.1:$PORT_ngram/metrics" >"$TMP/metrics"
val() { sed -n "s/^$1{model_name=\"stories260K\"} //p" "$TMP/metrics"; }
drafts=$(val 'vllm:spec_decode_num_drafts_total')
tokens=$(val 'vllm:spec_decode_num_draft_tokens_total')
acc=$(val 'vllm:spec_decode_num_accepted_tokens_total')
[ "${drafts:-0}" -gt 0 ] && [ "${acc:-0}" -gt 0 ] && [ "$acc" -le "$tokens" ]
check metrics_spec_counters $? "($drafts $tokens $acc)"
pos_sum=$(grep '^vllm:spec_decode_num_accepted_tokens_per_pos_total{' "$TMP/metrics" |
  awk '{s += $2} END {print s + 0}')
[ "$pos_sum" = "$acc" ] && grep -q 'position="5"' "$TMP/metrics" && ! grep -q 'position="6"' "$TMP/metrics"
check metrics_per_position $? "($pos_sum vs $acc)"
curl -s "http://127.0.0.1:$PORT_plain/metrics" | grep -q spec_decode
[ $? -ne 0 ]; check plain_metrics_no_spec $?

# usage errors: exit 2 with one line; a draft of another vocabulary: exit 1 naming it
"$CPULM" serve -m "$MODEL" --port 0 --spec draft >/dev/null 2>"$TMP/e1"
[ $? -eq 2 ] && grep -q "needs a draft model" "$TMP/e1"; check spec_draft_needs_md $?
"$CPULM" serve -m "$MODEL" --port 0 -md "$TMP/missing.gguf" >/dev/null 2>"$TMP/e2"
[ $? -eq 2 ] && grep -q "missing.gguf" "$TMP/e2"; check missing_draft_file $?
"$CPULM" serve -m "$MODEL" --port 0 --spec ngram --draft-min 9 --draft-max 4 >/dev/null 2>"$TMP/e3"
[ $? -eq 2 ]; check draft_min_above_max $?
if [ -f "$OTHER" ]; then
  timeout 60 "$CPULM" serve -m "$MODEL" --port 0 -md "$OTHER" >/dev/null 2>"$TMP/e4"
  [ $? -eq 1 ] && grep -q "vocabulary" "$TMP/e4"; check draft_vocab_mismatch $? "$(cat "$TMP/e4")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
