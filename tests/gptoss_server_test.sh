#!/usr/bin/env bash
# gptoss_server_test.sh: `cpulm serve` with a gpt-oss model (a synthetic tiny-gpt-oss file
# made here) and the harmony template: curl checks of reasoning_content and tool_calls
# (non-streamed and streamed), reasoning_effort, forced tool calls (required, named); then the
# official openai npm client (gptoss_openai_test.mjs) when npm can install it into
# $CPULM_NPM_DIR. The model writes harmony's structure under a grammar (it is random).
# Usage: gptoss_server_test.sh path/to/cpulm. The server binds 127.0.0.1 on a free port;
# the script kills only the PID it started; every wait is bounded.
set -u
CPULM=$1
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib.sh"
need_tools curl jq
MODEL=$TMP/gptoss.gguf
"$CPULM" synth --shape tiny-gpt-oss --type f32 -o "$MODEL" >/dev/null 2>&1
check synth $?
lib_serve main "$MODEL" -t 1 -np 2 --chat-template harmony
check server_ready $?
URL=http://127.0.0.1:$PORT
chat() { curl -s --max-time 60 "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d "$1"; }

G='root ::= "<|channel|>analysis<|message|>" [a-z ]{3,12} "<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"" [a-z]{2,8} "\"}"'
BODY=$(jq -cn --arg g "$G" '{messages:[{role:"user",content:"Weather in Paris?"}],grammar:$g,
  temperature:0,max_tokens:200,reasoning_effort:"high",
  tools:[{type:"function",function:{name:"get_weather",parameters:{type:"object",
  properties:{city:{type:"string"}}}}}]}')
chat "$BODY" >"$TMP/r.json"
jq -e '.choices[0].finish_reason == "tool_calls" and .choices[0].message.content == null and
  (.choices[0].message.reasoning_content | test("^[a-z ]{3,12}$")) and
  .choices[0].message.tool_calls[0].function.name == "get_weather" and
  (.choices[0].message.tool_calls[0].function.arguments | fromjson | .city | test("^[a-z]{2,8}$"))' \
  "$TMP/r.json" >/dev/null
check call_and_reasoning $? "$(head -c 600 "$TMP/r.json")"

# streamed: the reasoning deltas and the call's argument deltas add up to the same
chat "$(echo "$BODY" | jq -c '.stream = true')" | sed -n 's/^data: //p' | grep -v '^\[DONE\]$' >"$TMP/s.jsonl"
r1=$(jq -r '.choices[0].message.reasoning_content' "$TMP/r.json")
r2=$(jq -j '.choices[0].delta.reasoning_content // ""' "$TMP/s.jsonl")
check stream_reasoning "$([ "$r1" = "$r2" ]; echo $?)" "'$r1' vs '$r2'"
a1=$(jq -r '.choices[0].message.tool_calls[0].function.arguments' "$TMP/r.json")
a2=$(jq -j '.choices[0].delta.tool_calls[0].function.arguments // ""' "$TMP/s.jsonl")
check stream_arguments "$([ "$a1" = "$a2" ]; echo $?)" "'$a1' vs '$a2'"
c2=$(jq -j '.choices[0].delta.content // ""' "$TMP/s.jsonl")
check stream_no_content "$([ -z "$c2" ]; echo $?)" "'$c2'"

# a forced call (no grammar of the client's): the server's grammar writes harmony's
# commentary message to the tool, its arguments under the tool's schema
# (bounded schemas: the random model would write a free string until max_tokens)
FORCED=$(echo "$BODY" | jq -c 'del(.grammar) | .max_tokens = 120 | .tools = [{type:"function",
  function:{name:"get_weather",parameters:{type:"object",properties:{city:{type:"string",
  enum:["paris","rome"]}},required:["city"],additionalProperties:false}}},{type:"function",
  function:{name:"get_time",parameters:{type:"object",properties:{zone:{type:"integer",
  minimum:-12,maximum:14}},required:["zone"],additionalProperties:false}}}]')
for choice in '"required"' '{"type":"function","function":{"name":"get_time"}}'; do
  chat "$(echo "$FORCED" | jq -c --argjson c "$choice" '.tool_choice = $c')" >"$TMP/f.json"
  jq -e --argjson c "$choice" '.choices[0].finish_reason == "tool_calls" and
    (.choices[0].message.tool_calls | length) == 1 and
    (.choices[0].message.tool_calls[0].function as $f |
      ($c | type) == "string" or $f.name == "get_time") and
    (.choices[0].message.tool_calls[0].function.arguments | fromjson | type) == "object"' \
    "$TMP/f.json" >/dev/null
  check "forced_call $choice" $? "$(head -c 600 "$TMP/f.json")"
done
jq -e '.choices[0].message.tool_calls[0].function.arguments | fromjson | .zone | type == "number"' \
  "$TMP/f.json" >/dev/null
check forced_call_schema $? "$(head -c 600 "$TMP/f.json")"
chat "$(echo "$FORCED" | jq -c '.tool_choice = "required" | .stream = true')" |
  sed -n 's/^data: //p' | grep -v '^\[DONE\]$' >"$TMP/fs.jsonl"
jq -s -e 'map(.choices[0].finish_reason // empty) | last == "tool_calls"' "$TMP/fs.jsonl" >/dev/null
check forced_call_stream $? "$(head -c 600 "$TMP/fs.jsonl")"

# Ollama's /api/chat splits harmony too: the random model's reply never closes the header
# the prompt opened (no <|message|>), so nothing of it is content (it was all content, control
# tokens included, before)
curl -s --max-time 60 "$URL/api/chat" -d '{"model":"m","stream":false,"messages":[{"role":"user",
  "content":"hi"}],"options":{"temperature":0,"num_predict":40}}' >"$TMP/o.json"
jq -e '.done == true and .message.content == "" and .eval_count > 0' "$TMP/o.json" >/dev/null
check ollama_chat_harmony $? "$(head -c 400 "$TMP/o.json")"

# the official openai client
NPM_DIR=${CPULM_NPM_DIR:-$TMP/npm}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "skip openai client: node/npm not installed"
elif [ ! -d "$NPM_DIR/node_modules/openai" ] && ! timeout 20 npm view openai version >/dev/null 2>&1; then
  echo "skip openai client: npm cannot reach the registry"
else
  mkdir -p "$NPM_DIR"
  if [ ! -d "$NPM_DIR/node_modules/openai" ]; then
    (cd "$NPM_DIR" && { [ -f package.json ] || echo '{"private":true}' >package.json; } &&
     timeout 240 npm install --no-audit --no-fund openai >"$TMP/npm.log" 2>&1)
  fi
  if [ -d "$NPM_DIR/node_modules/openai" ]; then
    timeout 120 node "$HERE/gptoss_openai_test.mjs" "$URL" "$NPM_DIR" >"$TMP/node.out" 2>&1
    rc=$?
    cat "$TMP/node.out"
    check openai_client $rc
  else
    echo "skip openai client: npm install failed: $(tail -n 3 "$TMP/npm.log")"
  fi
fi
echo "gptoss_server: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
