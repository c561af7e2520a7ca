#!/usr/bin/env bash
# hybrid_server_test.sh: `cpulm serve` with a hybrid model (a tiny synthetic qwen35 file:
# Gated DeltaNet layers whose recurrent state cannot be cut partway). Greedy completions of
# prompts sharing prefixes, sent one after another, 8 at once, streamed and with n = 2,
# each equal byte for byte to the same request on a fresh server; a conversation that grows
# (reuses the previous sequence whole); a server that trims idle slots (--kv-idle); the
# default --cache-ram keeps state checkpoints (src/server/hcache.h): on one slot, a repeated
# prompt, prompts sharing a long prefix (RAG) and a conversation whose next turn renders the
# reply differently restore a checkpoint (cached_tokens > 0) and equal a fresh server's text;
# idle slots trimmed to nothing (--kv-idle 0) do too. XML tool calls (Qwen3.5's format) come
# back with arguments typed by the tool's schema.
# HYBRID_SHAPE picks another synth shape (tiny-qwen35moe, tiny-qwen3next; they pass too;
# tiny-gemma3, a sliding-window model whose prompt cache stays on, passes every check but the
# hybrid-only ones, which it skips).
# Usage: hybrid_server_test.sh path/to/cpulm. Servers bind 127.0.0.1 on a free port; the
# script kills only the PIDs it started; every wait loop is bounded.
set -u
CPULM=$1
. "$(dirname "$0")/lib.sh"
need_tools curl jq
MODEL=$TMP/hybrid.gguf
"$CPULM" synth --shape "${HYBRID_SHAPE:-tiny-qwen35}" --type f32 -o "$MODEL" >/dev/null 2>&1
check synth $?

# start_server NAME ARGS...: sets PORT and SPID; waits (bounded) for /ready.
start_server() {
  local name=$1
  shift
  lib_serve "$name" "$MODEL" -t 1 "$@"
}
stop_server() { kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; }
body() { jq -cn --arg p "$1" --argjson n "${2:-24}" '{prompt:$p,max_tokens:$n,temperature:0}'; }
complete() { # prompt [max_tokens] -> the whole response on stdout
  curl -s --max-time 60 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -d "$(body "$1" "${2:-24}")"
}

BASE="Once upon a time there was a little dog who"
PROMPTS=("$BASE liked to run" "$BASE liked to swim in the lake" "$BASE" "$BASE liked to run and jump"
         "The cat sat on the mat" "$BASE liked to run" "The cat sat on the mat and slept" "x")

# references: every prompt on a fresh one-slot server without any cache
for i in "${!PROMPTS[@]}"; do
  start_server "ref$i" -np 1 --cache-ram 0 || exit 1
  complete "${PROMPTS[$i]}" | jq -r '.choices[0].text' >"$TMP/ref$i"
  check "ref${i}_nonempty" "$([ -s "$TMP/ref$i" ]; echo $?)"
  stop_server
done

# the default --cache-ram: starts with the prompt cache on, serves
start_server main -np 4 || { echo "FAIL main_start"; exit 1; }
check main_starts 0
grep -q "prompt cache off" "$TMP/main.err"
check no_cache_off_notice "$([ $? -ne 0 ]; echo $?)" "$(cat "$TMP/main.err")"
limit=$(curl -s "http://127.0.0.1:$PORT/metrics" | sed -n 's/^cpulm_prompt_cache_limit_bytes \([0-9.e+]*\)$/\1/p')
check cache_limit_metric "$(awk -v r="${limit:-0}" 'BEGIN { exit !(r > 0) }'; echo $?)" "limit=$limit"
reserved=$(curl -s "http://127.0.0.1:$PORT/metrics" | sed -n 's/^cpulm_kv_bytes_reserved \([0-9.e+]*\)$/\1/p')
check kv_reserved_metric "$(awk -v r="${reserved:-0}" 'BEGIN { exit !(r > 0) }'; echo $?)" "reserved=$reserved"

same_as_ref() { # name, index, file
  cmp -s "$TMP/ref$2" "$3"
  check "$1" $? "got '$(head -c 200 "$3")' want '$(head -c 200 "$TMP/ref$2")'"
}
for round in 1 2; do # the second round finds every prefix in some slot
  for i in "${!PROMPTS[@]}"; do
    complete "${PROMPTS[$i]}" >"$TMP/seq.json"
    jq -r '.choices[0].text' "$TMP/seq.json" >"$TMP/seq$i"
    same_as_ref "sequential_${round}_$i" "$i" "$TMP/seq$i"
  done
done
for i in "${!PROMPTS[@]}"; do # 8 at once on 4 slots
  complete "${PROMPTS[$i]}" >"$TMP/conc$i.json" &
done
wait_bounded() { for _ in $(seq 600); do [ -z "$(jobs -rp | grep -v -F -x -f <(printf '%s\n' "${PIDS[@]}"))" ] && return; sleep 0.1; done; }
wait_bounded
for i in "${!PROMPTS[@]}"; do
  jq -r '.choices[0].text' "$TMP/conc$i.json" >"$TMP/conc$i"
  same_as_ref "concurrent_$i" "$i" "$TMP/conc$i"
done

# streaming: the deltas join into the same text
i=1
curl -s -N --max-time 60 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d "$(jq -cn --arg p "${PROMPTS[$i]}" '{prompt:$p,max_tokens:24,temperature:0,stream:true}')" \
  | sed -n 's/^data: //p' | grep -v '^\[DONE\]$' | jq -j '.choices[0].text // ""' >"$TMP/stream"
echo >>"$TMP/stream"
same_as_ref stream "$i" "$TMP/stream"

# n = 2: both choices copy the prompt's whole state and equal the reference
complete_n() { curl -s --max-time 60 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
  -d "$(jq -cn --arg p "$1" '{prompt:$p,max_tokens:24,temperature:0,n:2}')"; }
complete_n "${PROMPTS[3]}" >"$TMP/n2.json"
for c in 0 1; do
  jq -r ".choices[] | select(.index == $c) | .text" "$TMP/n2.json" >"$TMP/n2_$c"
  same_as_ref "n2_choice$c" 3 "$TMP/n2_$c"
done

# a conversation that grows: the next prompt is the previous prompt and its answer and more
P1="The little bird sang a song"
A1=$(complete "$P1" 16 | jq -r '.choices[0].text')
P2="$P1$A1 and then"
complete "$P2" >"$TMP/grow.json"
jq -r '.choices[0].text' "$TMP/grow.json" >"$TMP/grow"
stop_server
start_server growref -np 1 --cache-ram 0 || exit 1
complete "$P2" | jq -r '.choices[0].text' >"$TMP/growref"
stop_server
cmp -s "$TMP/grow" "$TMP/growref"
check grow_same $? "got '$(cat "$TMP/grow")' want '$(cat "$TMP/growref")'"
cached=$(jq -r '.usage.prompt_tokens_details.cached_tokens // 0' "$TMP/grow.json")
check grow_reuses_whole_sequence "$([ "$cached" -gt 0 ]; echo $?)" "$(jq -c '.usage' "$TMP/grow.json")"

# the prompt cache on one slot (every reuse comes from a checkpoint, not the slot):
# the prompts run in order, each checked against the reference text
DOC="In a small village by the sea there lived an old fisherman and his wife. Every morning he went out in his boat and every evening he came back with fish."
C1="$DOC Question: who lived in the village? Answer:"
C2="$DOC Question: what did he do every morning? Answer:"
C3="$DOC Question: when did he come back? Answer:"
T1="The sun was warm and the children played by the river until"
T2="$T1 the sun went down. Then they walked home and"
CASES=("$C1" "The cat sat on the mat" "$C1" "$C2" "$C3" "$T1")
# references on one server without the prompt cache: one slot, and no prompt extends the
# sequence the slot holds before it (T2 goes first), so each is evaluated from the start
start_server cref -np 1 --cache-ram 0 || exit 1
complete "$T2" 16 | jq -r '.choices[0].text' >"$TMP/t2ref"
for i in "${!CASES[@]}"; do
  complete "${CASES[$i]}" 16 | jq -r '.choices[0].text' >"$TMP/cref$i"
done
stop_server
start_server pc -np 1 || exit 1
for i in "${!CASES[@]}"; do
  complete "${CASES[$i]}" 16 >"$TMP/pc$i.json"
  jq -r '.choices[0].text' "$TMP/pc$i.json" >"$TMP/pc$i"
  cmp -s "$TMP/cref$i" "$TMP/pc$i"
  check "prompt_cache_same_$i" $? "got '$(cat "$TMP/pc$i")' want '$(cat "$TMP/cref$i")'"
  jq -r '.usage.prompt_tokens_details.cached_tokens // 0' "$TMP/pc$i.json" >"$TMP/pc$i.cached"
done
# 2: the repeat after an unrelated prompt took the slot; 4: the third question on the shared
# document (the second saves the state where it leaves the first's cached blocks, unless an
# earlier checkpoint already lies inside the shared part)
for i in 2 4; do
  c=$(cat "$TMP/pc$i.cached")
  check "prompt_cache_hit_$i" "$([ "$c" -ge 32 ]; echo $?)" "$(jq -c '.usage' "$TMP/pc$i.json")"
done
# same_from_cache NAME PROMPT REF [NOTE]: completes PROMPT (16 tokens); checks NAME_same (its
# text equals the file REF) and NAME_checkpoint (at least 32 prompt tokens came from the cache)
same_from_cache() {
  local name=$1 prompt=$2 ref=$3 note=${4:-} c
  complete "$prompt" 16 >"$TMP/$name.json"
  jq -r '.choices[0].text' "$TMP/$name.json" >"$TMP/$name"
  cmp -s "$ref" "$TMP/$name"
  check "${name}_same" $? "got '$(cat "$TMP/$name")' want '$(cat "$ref")'$note"
  c=$(jq -r '.usage.prompt_tokens_details.cached_tokens // 0' "$TMP/$name.json")
  check "${name}_checkpoint" "$([ "$c" -ge 32 ]; echo $?)" "$(jq -c '.usage' "$TMP/$name.json")"
}
# a conversation: turn 1, then turn 2 whose prompt has a different answer text after it
A1=$(jq -r '.choices[0].text' "$TMP/pc5.json")
same_from_cache chat_turn2 "$T2" "$TMP/t2ref" " (turn 1 answered '$A1')"
stop_server

# --kv-idle 0: every finished slot is cleared, the prompt cache still gives the checkpoint
start_server idle0 -np 2 --kv-idle 0 || exit 1
complete "$C1" 16 >/dev/null
same_from_cache kv_idle0 "$C1" "$TMP/cref0"
stop_server

# free slots trimmed to 8 tokens in all: a trim clears a hybrid sequence whole
start_server idle -np 2 --kv-idle 8 || exit 1
for i in "${!PROMPTS[@]}"; do
  complete "${PROMPTS[$i]}" | jq -r '.choices[0].text' >"$TMP/idle$i"
  same_as_ref "kv_idle_$i" "$i" "$TMP/idle$i"
done
stop_server

# Qwen3.5's XML tool calls (a template with <function=...><parameter=...>): a forced call's
# arguments are typed by the tool's schema, so string parameters whose values read "42" and
# "true" stay strings and an integer parameter is a number, whole and streamed
cat >"$TMP/qwen_xml.jinja" <<'JINJA'
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}{#- calls: <tool_call> <function=NAME> <parameter=KEY> VALUE </parameter> </function> #}
JINJA
start_server xml -np 1 --chat-template "$TMP/qwen_xml.jinja" || exit 1
XREQ=$(jq -cn '{messages:[{role:"user",content:"Look up item 42"}],temperature:0,max_tokens:400,
  tools:[{type:"function",function:{name:"lookup",parameters:{type:"object",properties:{
    id:{type:"string",enum:["42"]},flag:{type:"string",enum:["true"]},
    n:{type:"integer",minimum:0,maximum:9}},required:["id","flag","n"]}}}],
  tool_choice:{type:"function",function:{name:"lookup"}}}')
curl -s --max-time 60 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "$XREQ" >"$TMP/xml.json"
jq -e '.choices[0].finish_reason == "tool_calls" and
  (.choices[0].message.tool_calls[0].function.arguments | fromjson |
   .id == "42" and .flag == "true" and (.n | type) == "number")' "$TMP/xml.json" >/dev/null
check xml_args_typed_by_schema $? "$(head -c 400 "$TMP/xml.json")"
curl -s -N --max-time 60 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "$(echo "$XREQ" | jq -c '.stream = true')" | sed -n 's/^data: \({.*\)$/\1/p' >"$TMP/xml.jsonl"
jq -s -e --slurpfile w "$TMP/xml.json" '([.[].choices[0].delta.tool_calls[]?.function.arguments] | add) as $a |
  $a == $w[0].choices[0].message.tool_calls[0].function.arguments and ($a | fromjson | .id == "42")' \
  "$TMP/xml.jsonl" >/dev/null
check xml_args_typed_streamed $? "$(head -c 600 "$TMP/xml.jsonl")"
stop_server

echo "hybrid_server: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
