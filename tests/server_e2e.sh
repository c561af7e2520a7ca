#!/usr/bin/env bash
# server_e2e.sh: end-to-end tests of `cpulm serve` with curl on stories260K: probes,
# metrics, completions and chat (plain and SSE), batching never changing results, errors
# and their status codes, keep-alive, malformed HTTP, a long prompt not stalling running
# streams, client disconnects, the RAM prompt cache across slots, KV memory following the
# tokens cached, queue limits (429) and the SIGTERM drain, /v1/embeddings (vectors equal
# `cpulm embed --json`, base64, errors), no request holding up the others (a 2,048-input
# embedding next to a short completion, /health, a disconnect and SIGTERM: issue 25),
# and Qwen3-style <think> splitting into reasoning_content on tiny-qwen3.
# llama-server's native routes (/completion, /tokenize, ...) and Ollama's (/api/...) with curl.
# Then the official `openai` npm package drives a server (openai_client_test.mjs), with
# ajv + ajv-formats validating structured outputs and tool arguments: they are installed
# with npm into $CPULM_NPM_DIR (default: a temp dir); if npm cannot reach the registry
# that part is skipped with the reason printed. openai_embed_test.mjs drives
# embeddings.create the same way, and the `ollama` package and LangChain's ChatOllama
# (@langchain/ollama) Ollama's API (ollama_client_test.mjs, langchain_ollama_test.mjs);
# LangChain's ChatOpenAI / OpenAIEmbeddings (@langchain/openai) and the Vercel `ai` SDK's
# OpenAI-compatible provider the OpenAI API (langchain_openai_test.mjs, ai_sdk_client_test.mjs).
# Usage: server_e2e.sh path/to/cpulm. Servers bind 127.0.0.1 on a free port; the script
# kills only the PIDs it started; every wait loop is bounded.
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
. "$(dirname "$0")/lib.sh"
need_file "$MODEL"
need_tools curl jq

# start_server NAME ARGS...: sets PORT and SPID; waits (bounded) for /ready.
start_server() {
  local name=$1
  shift
  lib_serve "$name" "$MODEL" "$@"
}

KEY=sk-test-123
AUTH="Authorization: Bearer $KEY"
start_server main -np 8 -c 2100 --chunk 128 -t 1 --api-key $KEY --max-body 65536
check server_ready $?
URL=http://127.0.0.1:$PORT

# ---- probes, models, metrics ----
[ "$(curl -s $URL/health)" = '{"status":"ok"}' ]; check health $?
curl -s -H "$AUTH" $URL/v1/models | jq -e '.object == "list" and .data[0].id == "stories260K"' >/dev/null
check models $?
curl -s $URL/metrics >"$TMP/metrics"
for name in 'vllm:num_requests_waiting{model_name="stories260K"}' 'vllm:num_requests_running' \
            'vllm:gpu_cache_usage_perc' 'vllm:kv_cache_usage_perc' 'vllm:prompt_tokens_total' \
            'vllm:generation_tokens_total' 'vllm:time_to_first_token_seconds_bucket' \
            'vllm:time_per_output_token_seconds_bucket' 'vllm:e2e_request_latency_seconds_count' \
            'vllm:request_success_total' 'cpulm_requests_waiting' 'cpulm_kv_cache_usage_ratio' \
            'cpulm_http_responses_total' 'cpulm_ready 1'; do
  grep -qF "$name" "$TMP/metrics"; check "metric $name" $?
done

# ---- completions: greedy text equals the CLI's ----
post() { # path json -> body on stdout
  curl -s -H "$AUTH" -H 'Content-Type: application/json' "$URL$1" -d "$2"
}
post /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' >"$TMP/c1"
jq -e '.object == "text_completion" and .choices[0].finish_reason == "length"
       and .usage.prompt_tokens == 5 and .usage.completion_tokens == 24
       and .usage.total_tokens == 29' "$TMP/c1" >/dev/null
check completion_shape $? "$(head -c 300 "$TMP/c1")"
"$CPULM" run -m "$MODEL" -p "Once upon a time" -n 24 --temp 0 -t 1 2>/dev/null >"$TMP/cli_out"
[ "Once upon a time$(jq -j '.choices[0].text' "$TMP/c1")" = "$(head -c -1 "$TMP/cli_out")" ]
check completion_equals_cli $?

# ---- streaming: SSE framing and the same text ----
curl -sN -H "$AUTH" $URL/v1/completions \
  -d '{"prompt":"Once upon a time","max_tokens":24,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' >"$TMP/s1"
[ "$(tail -n 2 "$TMP/s1" | head -n 1)" = "data: [DONE]" ]; check sse_done $?
grep -v '^$' "$TMP/s1" | grep -qv '^data: '; [ $? -ne 0 ]; check sse_only_data_lines $?
[ "$(grep -c '^$' "$TMP/s1")" -eq "$(grep -c '^data: ' "$TMP/s1")" ]; check sse_blank_line_per_event $?
grep '^data: {' "$TMP/s1" | sed 's/^data: //' | jq -j '.choices[0].text // empty' >"$TMP/s1_text"
[ "$(cat "$TMP/s1_text")" = "$(jq -j '.choices[0].text' "$TMP/c1")" ]; check sse_text_equals_plain $?
grep '^data: {' "$TMP/s1" | tail -n 1 | sed 's/^data: //' | jq -e '.usage.completion_tokens == 24 and (.choices | length) == 0' >/dev/null
check sse_usage_chunk $?

# ---- chat (plain default template), n > 1 sharing the prompt, stop sequences ----
post /v1/chat/completions '{"messages":[{"role":"system","content":"Tell a story."},{"role":"user","content":"A dog"}],"max_tokens":16,"temperature":0,"n":3}' >"$TMP/chat"
jq -e '.object == "chat.completion" and (.choices | length) == 3 and .choices[0].message.role == "assistant"
       and .choices[0].message.content == .choices[2].message.content
       and (.choices[0].message.content | length) > 0' "$TMP/chat" >/dev/null
check chat_n3 $? "$(head -c 300 "$TMP/chat")"
post /v1/completions '{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"stop":["Lily"]}' >"$TMP/stop"
jq -e '.choices[0].finish_reason == "stop" and (.choices[0].text | endswith("named "))' "$TMP/stop" >/dev/null
check stop_sequence $? "$(head -c 300 "$TMP/stop")"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"logprobs":true,"top_logprobs":2,"temperature":0}' >"$TMP/lp"
jq -e '(.choices[0].logprobs.content | length) == 3 and (.choices[0].logprobs.content[0].top_logprobs | length) == 2
       and .choices[0].logprobs.content[0].logprob <= 0' "$TMP/lp" >/dev/null
check chat_logprobs $?

# ---- 8 concurrent greedy requests equal the same requests served alone ----
PROMPTS=("Once upon a time" "The little dog" "Tom and Sam went to the park" "She saw a big red"
         "One day, a girl named Lily" "The sun was" "He wanted to play with" "There was a cat")
body() { printf '{"prompt":"%s","max_tokens":48,"temperature":0}' "$1"; }
for i in "${!PROMPTS[@]}"; do post /v1/completions "$(body "${PROMPTS[$i]}")" >"$TMP/par$i" & done
wait_jobs() { for j in $(jobs -p); do case " ${PIDS[*]} " in *" $j "*) ;; *) wait "$j";; esac; done; }
wait_jobs
same=0
for i in "${!PROMPTS[@]}"; do
  post /v1/completions "$(body "${PROMPTS[$i]}")" >"$TMP/alone$i"
  a=$(jq -c '[.choices, .usage.completion_tokens]' "$TMP/par$i")
  b=$(jq -c '[.choices, .usage.completion_tokens]' "$TMP/alone$i")
  if [ -n "$a" ] && [ "$a" = "$b" ]; then same=$((same + 1)); else echo "  prompt $i: $a vs $b"; fi
done
[ $same -eq 8 ]; check batched_equals_alone $? "($same of 8)"

# ---- errors: OpenAI error JSON with the right status codes ----
status() { # expected, curl args...
  local want=$1; shift
  local got
  got=$(curl -s -o "$TMP/err" -w '%{http_code}' "$@")
  [ "$got" = "$want" ] && jq -e '.error.message and .error.type and (.error | has("param")) and (.error | has("code"))' "$TMP/err" >/dev/null
}
status 400 -H "$AUTH" $URL/v1/completions -d '{"prompt":'; check err_bad_json $?
status 400 -H "$AUTH" $URL/v1/completions -d '{"prompt":"x","temperature":9}'; check err_bad_field $?
jq -e '.error.param == "temperature"' "$TMP/err" >/dev/null; check err_param_named $?
status 400 -H "$AUTH" $URL/v1/completions -d '{"prompt":"x","n":9}'; check err_n_over_parallel $?
status 401 $URL/v1/completions -d '{"prompt":"x"}'; check err_no_key $?
status 401 -H "Authorization: Bearer nope" $URL/v1/models; check err_wrong_key $?
status 404 -H "$AUTH" $URL/v1/nothing; check err_404 $?
status 405 -H "$AUTH" $URL/v1/completions; check err_405 $?
head -c 70000 /dev/zero | tr '\0' 'a' >"$TMP/big"
status 413 -H "$AUTH" --data-binary @"$TMP/big" $URL/v1/completions; check err_413 $?
python_free_long=$(printf 'Once upon a time there was a dog. %.0s' $(seq 300))
status 400 -H "$AUTH" $URL/v1/completions -d "{\"prompt\":\"$python_free_long\",\"max_tokens\":2}"
check err_context_length $?
jq -e '.error.code == "context_length_exceeded"' "$TMP/err" >/dev/null; check err_context_code $?

# ---- structured output and tool calls (the openai client below checks them in depth) ----
post /v1/chat/completions '{"messages":[{"role":"user","content":"A pet"}],"max_tokens":200,"temperature":0.9,"seed":4,
  "response_format":{"type":"json_schema","json_schema":{"name":"pet","strict":true,"schema":{"type":"object",
  "properties":{"kind":{"enum":["cat","dog"]},"age":{"type":"integer","minimum":1,"maximum":20}},"required":["kind","age"],
  "additionalProperties":false}}}}' >"$TMP/so"
jq -e '.choices[0].finish_reason == "stop" and (.choices[0].message.content | fromjson
       | (.kind == "cat" or .kind == "dog") and .age >= 1 and .age <= 20)' "$TMP/so" >/dev/null
check structured_output $? "$(head -c 300 "$TMP/so")"
status 400 -H "$AUTH" $URL/v1/chat/completions -d '{"messages":[{"role":"user","content":"x"}],"json_schema":{"type":"integer","multipleOf":2}}'
check err_unsupported_schema $?
jq -e '.error.param == "json_schema" and (.error.message | contains("multipleOf"))' "$TMP/err" >/dev/null; check err_schema_named $?
# grammar costs (issue 25): compiled in linear time, and each limit answered 400 naming it,
# fast (15 x "a"{0,4096} took 14-40 s of the request worker; the limits gave 500 after that)
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
gbody() { jq -n --arg g "$1" '{prompt:"a",max_tokens:4,temperature:0,grammar:$g}'; }
t0=$(now_ms)
post /v1/completions "$(gbody "root ::=$(printf ' "a"{0,4096}%.0s' $(seq 15))")" >"$TMP/g15"
ms=$(( $(now_ms) - t0 ))
jq -e '.choices[0].text | test("^a*$")' "$TMP/g15" >/dev/null && [ $ms -lt 5000 ]
check grammar_15_repeats_fast $? "(${ms} ms) $(head -c 200 "$TMP/g15")"
g_alts="root ::= \"x0\"$(for i in $(seq 3000); do printf ' | "x%d"' "$i"; done)"
t0=$(now_ms)
status 400 -H "$AUTH" $URL/v1/completions -d "$(gbody "$g_alts")"; r=$?
ms=$(( $(now_ms) - t0 ))
[ $r = 0 ] && [ $ms -lt 2000 ] && jq -e '.error.param == "grammar" and
  (.error.message | contains("more than 2048 alternatives in rule '"'root'"' (limit 2048)"))' "$TMP/err" >/dev/null
check err_grammar_alternatives_limit $? "(${ms} ms) $(head -c 200 "$TMP/err")"
status 400 -H "$AUTH" $URL/v1/completions -d "$(gbody 'root ::= ("a"{0,1000}){0,1000}')"
check err_grammar_nested_repeat $?
jq -e '.error.message | contains("(limit 65536)")' "$TMP/err" >/dev/null; check err_grammar_nested_named $?
status 400 -H "$AUTH" $URL/v1/completions -d "$(gbody 'root ::= [^\x00-\U0010FFFF]')"
check err_grammar_empty_class $?
status 400 -H "$AUTH" $URL/v1/chat/completions -d '{"messages":[{"role":"user","content":"x"}],
  "response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"string","pattern":"^(a{0,1000}){0,1000}$"}}}}'
check err_schema_nested_repeat $?
jq -e '.error.message | contains("nested repetitions") and contains("(limit 65536)")' "$TMP/err" >/dev/null
check err_schema_nested_named $? "$(head -c 200 "$TMP/err")"
# product under the limit, but ambiguous past what a matcher follows: still a fast 400 (was 500)
pat="^$(printf '(a{0,100}){0,100}%.0s' $(seq 45))\$"
t0=$(now_ms)
status 400 -H "$AUTH" $URL/v1/chat/completions -d "$(jq -n --arg p "$pat" '{messages:[{role:"user",content:"x"}],
  max_tokens:50,response_format:{type:"json_schema",json_schema:{name:"p",schema:{type:"string",pattern:$p}}}}')"; r=$?
ms=$(( $(now_ms) - t0 ))
[ $r = 0 ] && [ $ms -lt 3000 ] && jq -e '.error.message | contains("too ambiguous") and contains("(limit")' "$TMP/err" >/dev/null
check err_grammar_too_ambiguous $? "(${ms} ms) $(head -c 200 "$TMP/err")"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Add 2 and 3"}],"max_tokens":100,"temperature":0.9,"seed":1,
  "tools":[{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"},
  "b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}}}],"tool_choice":"required","parallel_tool_calls":false}' >"$TMP/tc"
jq -e '.choices[0].finish_reason == "tool_calls" and .choices[0].message.tool_calls[0].function.name == "add"
       and (.choices[0].message.tool_calls[0].function.arguments | fromjson | (.a | type) == "number" and (.b | type) == "number")' \
  "$TMP/tc" >/dev/null
check tool_call_required $? "$(head -c 300 "$TMP/tc")"

# ---- logit_bias, NUL stop strings, llama-server aliases, unimplemented fields refused ----
# stories260K: greedy "Once upon a time" goes on with "," (id 432); id 3 is the byte <0x00>.
post /v1/completions '{"prompt":"Once upon a time","max_tokens":3,"temperature":0,"logit_bias":{"432":-100}}' >"$TMP/lb1"
jq -e '(.choices[0].text | startswith(",") | not) and .usage.completion_tokens == 3' "$TMP/lb1" >/dev/null
check logit_bias_bans $? "$(head -c 300 "$TMP/lb1")"
post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"logit_bias":[[3,100]],"seed":1}' >"$TMP/lb2"
jq -e '.choices[0].message.content == "\u0000\u0000\u0000\u0000"' "$TMP/lb2" >/dev/null
check logit_bias_forces $? "$(head -c 300 "$TMP/lb2")"
post /v1/completions '{"prompt":"Once upon a time","max_tokens":4,"logit_bias":{"3":100},"stop":["\u0000"]}' >"$TMP/nul"
jq -e '.choices[0].text == "" and .choices[0].finish_reason == "stop"' "$TMP/nul" >/dev/null
check nul_stop_string $? "$(head -c 300 "$TMP/nul")"
curl -sN -H "$AUTH" $URL/v1/completions -d '{"prompt":"Once upon a time","max_tokens":6,"temperature":0,"stream":true,
  "logit_bias":[[432,false]],"stop":["x\u0000"," \u0000"]}' >"$TMP/nul_s"
grep '^data: {' "$TMP/nul_s" | sed 's/^data: //' | jq -s -e '(map(.choices[0].text // "") | add | startswith(",") | not)
  and (map(.choices[0].finish_reason) | last) == "length"' >/dev/null
check logit_bias_stream $? "$(head -c 300 "$TMP/nul_s")"
post /v1/completions '{"prompt":"Once upon a time","n_predict":4,"temperature":0}' >"$TMP/np"
jq -e '.usage.completion_tokens == 4 and .choices[0].finish_reason == "length"' "$TMP/np" >/dev/null
check n_predict_alias $? "$(head -c 300 "$TMP/np")"
post /v1/completions '{"prompt":"Once upon a time","max_tokens":4,"typical_p":0.5,"seed":3,"mirostat":0,"user":"u"}' >"$TMP/typ"
jq -e '.usage.completion_tokens == 4' "$TMP/typ" >/dev/null; check typical_p_accepted $?
for f in '"logit_bias":{"512":1}' '"logit_bias":{"7":"x"}' '"mirostat":2' '"best_of":3' '"dry_multiplier":0.8' \
         '"suffix":"The end."' '"n_probs":2' '"grammar_lazy":true'; do
  name=$(printf '%s' "$f" | sed 's/^"\([a-z_]*\)".*/\1/')
  status 400 -H "$AUTH" $URL/v1/completions -d "{\"prompt\":\"x\",\"max_tokens\":2,$f}" &&
    jq -e --arg p "$name" '.error.param == $p' "$TMP/err" >/dev/null
  check "refused $f" $? "$(head -c 200 "$TMP/err")"
done

# ---- llama-server's native API: /completion (whole and SSE), /tokenize, /detokenize, /props,
# /apply-template, the OpenAI routes without /v1, GET /v1/models/{id} ----
post /completion '{"prompt":"Once upon a time","n_predict":24,"temperature":0}' >"$TMP/lc"
jq -e --arg t "$(jq -j '.choices[0].text' "$TMP/c1")" '.content == $t and .stop == true and .tokens_predicted == 24
  and .tokens_evaluated == 5 and .stop_type == "limit" and .model == "stories260K" and (.timings.predicted_n == 24)' "$TMP/lc" >/dev/null
check llama_completion $? "$(head -c 300 "$TMP/lc")"
curl -sN -H "$AUTH" $URL/completion -d '{"prompt":"Once upon a time","n_predict":40,"temperature":0,"stream":true,"stop":["Lily"]}' >"$TMP/lcs"
grep '^data: ' "$TMP/lcs" | sed 's/^data: //' | jq -s -e '(.[:-1] | all(.stop == false)) and (.[-1].stop == true)
  and .[-1].stop_type == "word" and .[-1].stopping_word == "Lily" and (map(.content) | add | endswith("named "))' >/dev/null
check llama_completion_stream $? "$(head -c 300 "$TMP/lcs")"
! grep -q '\[DONE\]' "$TMP/lcs"; check llama_stream_no_done_marker $?
post /completion '{"prompt":[1,403,407],"n_predict":2,"temperature":0}' | jq -e '.tokens_evaluated == 3' >/dev/null
check llama_completion_token_prompt $?
# A special token written in a text prompt is that token (llama-server: 5 tokens here, BOS,
# "Once", </s>, "upon" in two), not its characters spelled as text (7).
post /completion '{"prompt":"Once</s> upon","n_predict":1,"temperature":0}' | jq -e '.tokens_evaluated == 5' >/dev/null
check llama_completion_special_in_prompt $?
post /v1/completions '{"prompt":"Once</s> upon","max_tokens":1,"temperature":0}' | jq -e '.usage.prompt_tokens == 5' >/dev/null
check oai_completion_special_in_prompt $?
post /completion '{"prompt":"Once","n_predict":30,"temperature":0}' | jq -e '.stop_type == "eos" or .stop_type == "limit"' >/dev/null
check llama_completion_stop_type $?
post /tokenize '{"content":"Once upon","add_special":true}' | jq -e '.tokens == [1,403,407]' >/dev/null; check llama_tokenize $?
post /tokenize '{"content":"Once upon","with_pieces":true}' | jq -e '.tokens == [{"id":403,"piece":" Once"},{"id":407,"piece":" upon"}]' >/dev/null
check llama_tokenize_pieces $?
post /tokenize '{"content":"á","with_pieces":true}' | jq -e '.tokens[-2:] == [{"id":198,"piece":[195]},{"id":164,"piece":[161]}]' >/dev/null
check llama_tokenize_byte_pieces $?
post /detokenize '{"tokens":[403,407]}' | jq -e '.content == " Once upon"' >/dev/null; check llama_detokenize $?
http_status() { # expected, curl args...: only the status (llama-server's and Ollama's error shapes)
  local want=$1; shift
  [ "$(curl -s -o "$TMP/err" -w '%{http_code}' "$@")" = "$want" ]
}
http_status 400 -H "$AUTH" $URL/detokenize -d '{"tokens":[100000]}'; check llama_detokenize_bad_id $?
jq -e '.error.code == 400 and .error.type == "invalid_request_error"' "$TMP/err" >/dev/null; check llama_error_shape $?
post /apply-template '{"messages":[{"role":"user","content":"Hi"}]}' | jq -e '.prompt == "User: Hi\nAssistant:"' >/dev/null
check llama_apply_template $?
curl -s -H "$AUTH" $URL/props | jq -e '.total_slots == 8 and .default_generation_settings.n_ctx == 2100
  and .model_alias == "stories260K" and (.chat_template | type) == "string"' >/dev/null
check llama_props $?
post /chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}' | jq -e '.object == "chat.completion"' >/dev/null
check chat_without_v1 $?
post /completions '{"prompt":"Hi","max_tokens":2}' | jq -e '.object == "text_completion"' >/dev/null
check completions_without_v1 $?
curl -s -H "$AUTH" $URL/v1/models/stories260K | jq -e '.id == "stories260K" and .object == "model"' >/dev/null
check model_by_id $?
status 404 -H "$AUTH" $URL/v1/models/gpt-4; check model_by_id_404 $?
http_status 401 $URL/completion -d '{"prompt":"x"}'; check llama_needs_key $?
http_status 405 -H "$AUTH" $URL/completion; check llama_405 $?
[ "$(curl -s $URL/v1/health)" = '{"status":"ok"}' ]; check v1_health $?
# routes llama-server has and cpulm does not serve here (/infill: stories260K has no FIM
# tokens; rerank: this server has no --rerank): a clear 501 in its shape, not a 404
for path in /infill /rerank /v1/rerank /reranking; do
  http_status 501 -H "$AUTH" $URL$path -d '{"input_prefix":"a","query":"q","documents":["d"]}' &&
    jq -e '.error.code == 501 and (.error.message | test("not supported"))' "$TMP/err" >/dev/null
  check "llama_501 $path" $?
done
# ---- Ollama's API with curl (the ollama npm client below goes further) ----
post /api/chat '{"model":"stories260K","messages":[{"role":"user","content":"Hi"}],"options":{"num_predict":4,"temperature":0}}' >"$TMP/oc"
head -n -1 "$TMP/oc" | jq -s -e 'length >= 1 and all(.done == false and .message.role == "assistant")' >/dev/null &&
  tail -n 1 "$TMP/oc" | jq -e '.done == true and .eval_count == 4 and .done_reason == "length" and .prompt_eval_count > 0' >/dev/null
check ollama_chat_ndjson $? "$(head -c 300 "$TMP/oc")"
curl -s -D - -o /dev/null -H "$AUTH" $URL/api/generate -d '{"model":"m","prompt":"Hi","options":{"num_predict":1}}' | grep -qi '^content-type: application/x-ndjson'
check ollama_ndjson_type $?
post /api/generate '{"model":"m","prompt":"Once upon a time","raw":true,"stream":false,"options":{"num_predict":24,"temperature":0}}' |
  jq -e --arg t "$(jq -j '.choices[0].text' "$TMP/c1")" '.response == $t and .done == true' >/dev/null
check ollama_generate_equals_openai $?
curl -s -H "$AUTH" $URL/api/tags | jq -e '.models[0].name == "stories260K" and .models[0].details.format == "gguf"' >/dev/null
check ollama_tags $?
http_status 400 -H "$AUTH" $URL/api/chat -d '{"model":"m","messages":[{"role":"user","content":"x"}],"options":{"tfs_z":0.5}}' &&
  jq -e '.error | contains("tfs_z")' "$TMP/err" >/dev/null
check ollama_refuses_tfs_z $?
curl -s -H "$AUTH" $URL/api/chat -d '{"model":"m","messages":[{"role":"user","content":"x"}],"format":"yaml"}' | jq -e '.error | type == "string"' >/dev/null
check ollama_error_shape $?
post /api/generate '{"model":"m"}' | jq -e '.done == true and .done_reason == "load" and .response == ""' >/dev/null
check ollama_load_request $?
post /api/chat '{"model":"llama3.2:latest","messages":[{"role":"user","content":"x"}],"stream":false,"options":{"num_predict":1}}' |
  jq -e '.model == "llama3.2:latest"' >/dev/null
check ollama_echoes_model $?
post /api/chat '{"model":"m","messages":[],"keep_alive":0}' | jq -e '.done_reason == "unload" and .message.content == ""' >/dev/null
check ollama_unload_request $?

# ---- keep-alive: several requests on one connection; a 400 keeps it open ----
curl -sv -o /dev/null -H "$AUTH" $URL/health --next -o /dev/null -H "$AUTH" $URL/v1/models \
  --next -o /dev/null -H "$AUTH" -d '{bad' $URL/v1/completions --next -o /dev/null $URL/health 2>"$TMP/ka"
[ "$(grep -c 'Re-using existing connection\|Reusing existing' "$TMP/ka")" -ge 3 ]; check keep_alive $?

# ---- malformed HTTP: a 4xx, then the connection is closed cleanly ----
raw() { # bytes -> the server's answer (bounded wait)
  exec 3<>/dev/tcp/127.0.0.1/$PORT
  printf '%b' "$1" >&3
  timeout 5 cat <&3
  exec 3<&-
}
raw 'GARBAGE\r\n\r\n' | head -n 1 | grep -q '^HTTP/1.1 400'; check raw_garbage_400 $?
raw 'GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n' | head -n 1 | grep -q '^HTTP/1.1 400'
check raw_smuggling_400 $?
raw "GET /health HTTP/1.1\r\nHost: x\r\n$(printf 'X-A: b\\r\\n%.0s' $(seq 70))\r\n" | head -n 1 | grep -q '^HTTP/1.1 431'
check raw_too_many_headers_431 $?
raw 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >"$TMP/pipe"
[ "$(grep -o 'HTTP/1.1 200' "$TMP/pipe" | wc -l)" -eq 2 ]; check raw_pipelined $?
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test-123\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nf\r\n{"prompt":"Once\r\n16;ext=1\r\n upon","max_tokens":2}\r\n0\r\n\r\n' >"$TMP/chunked"
grep -q '"completion_tokens":2' "$TMP/chunked"; check raw_chunked_body $?
[ "$(curl -s $URL/health)" = '{"status":"ok"}' ]; check alive_after_malformed $?

# ---- a 2,000-token prompt does not stall 4 running streams ----
stamp() { while IFS= read -r line; do [ -n "$line" ] && echo "$EPOCHREALTIME"; done; }
for i in 0 1 2 3; do # one stream each; a timestamp per SSE data line; CPIDS: the curls
  curl -sN -H "$AUTH" $URL/v1/completions \
    -d "{\"prompt\":\"${PROMPTS[$i]}\",\"max_tokens\":2000,\"ignore_eos\":true,\"temperature\":0,\"stream\":true}" \
    > >(stamp >"$TMP/ts$i") &
  CPIDS[$i]=$!
done
for _ in $(seq 200); do
  n=0; for i in 0 1 2 3; do [ "$(wc -l <"$TMP/ts$i" 2>/dev/null || echo 0)" -ge 5 ] && n=$((n + 1)); done
  [ $n -eq 4 ] && break; sleep 0.02
done
long=$(printf 'Once upon a time there was a dog. %.0s' $(seq 200))
t0=$EPOCHREALTIME
post /v1/completions "{\"prompt\":\"$long\",\"max_tokens\":1}" >"$TMP/long" &
LONG=$!
sleep 0.3 # the prefill is under way: probes must not wait for the model
probe_ok=0
for path in /health /ready /metrics; do
  tt=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' $URL$path)
  awk -v c="${tt% *}" -v t="${tt#* }" 'BEGIN { exit !(c == 200 && t < 0.2) }' || { probe_ok=1; echo "  $path: $tt"; }
done
check probes_fast_during_prefill $probe_ok
wait $LONG
t1=$EPOCHREALTIME
jq -e '.usage.prompt_tokens > 1900' "$TMP/long" >/dev/null; check long_prompt_served $? "$(head -c 200 "$TMP/long")"
for i in 0 1 2 3; do
  # max gap between tokens inside [t0, t1]; chunked prefill keeps it near one step, far
  # below the whole prefill (the bound is generous: a third of it)
  res=$(awk -v a="$t0" -v b="$t1" '$1 >= a && $1 <= b { if (p) { g = $1 - p; if (g > m) m = g } p = $1; n++ }
        END { printf "%d %.3f %.3f", n, m, (b - a) / 3 }' "$TMP/ts$i")
  read -r n gap bound <<<"$res"
  awk -v n="$n" -v g="$gap" -v b="$bound" 'BEGIN { exit !(n >= 4 && g < b) }'
  check "stream${i}_flows_during_long_prefill" $? "(tokens $n, max gap ${gap}s, bound ${bound}s)"
  [ -n "${VERBOSE:-}" ] && echo "  stream $i: $n tokens during the long prefill, max gap ${gap}s (bound ${bound}s)"
done

# ---- client disconnect cancels: killing the streams frees their slots ----
for i in 0 1 2 3; do kill "${CPIDS[$i]}" 2>/dev/null; done
wait_jobs
running=1
for _ in $(seq 100); do
  running=$(curl -s $URL/metrics | sed -n 's/^cpulm_requests_running \([0-9]*\).*/\1/p')
  [ "$running" = 0 ] && break; sleep 0.02
done
[ "$running" = 0 ]; check disconnect_cancels $? "(running: $running)"

# ---- cpulm loadtest against the same server ----
"$CPULM" loadtest --url "$URL" --api-key $KEY --concurrency 1,4 --requests 8 --prompt-len 16 \
  --max-tokens 8 --stream -o json >"$TMP/lt.json" 2>"$TMP/lt.err"
check loadtest_rc $? "$(cat "$TMP/lt.err")"
jq -e '(.levels | length) == 2 and all(.levels[]; .ok == 8 and .errors == 0 and .ttft_ms.p50 > 0
       and .itl_ms.p99 >= .itl_ms.p50 and .output_tokens_per_s > 0)' "$TMP/lt.json" >/dev/null
check loadtest_report $? "$(head -c 400 "$TMP/lt.json")"
"$CPULM" loadtest --url "$URL" --concurrency 1 --requests 2 --max-tokens 2 >"$TMP/lt.md" 2>/dev/null
[ $? -eq 1 ] && grep -q '^|    1 |     0 |     2 |' "$TMP/lt.md"; check loadtest_counts_errors $?

# ---- the official openai npm client against the same server ----
HERE=$(cd "$(dirname "$0")" && pwd)
NPM_DIR=${CPULM_NPM_DIR:-$TMP/npm}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "skip openai client: node/npm not installed"; skipped=1
elif [ ! -d "$NPM_DIR/node_modules/ajv-formats" ] && ! timeout 20 npm view openai version >/dev/null 2>&1; then
  echo "skip openai client: npm cannot reach the registry"; skipped=1
else
  mkdir -p "$NPM_DIR"
  # the client, and a JSON-schema validator (ajv + formats) for the structured outputs
  if [ ! -d "$NPM_DIR/node_modules/openai" ] || [ ! -d "$NPM_DIR/node_modules/ajv-formats" ] ||
     [ ! -d "$NPM_DIR/node_modules/ollama" ] || [ ! -d "$NPM_DIR/node_modules/@langchain/ollama" ] ||
     [ ! -d "$NPM_DIR/node_modules/@langchain/openai" ] || [ ! -d "$NPM_DIR/node_modules/@ai-sdk/openai-compatible" ] ||
     [ ! -d "$NPM_DIR/node_modules/@ai-sdk/openai" ]; then
    (cd "$NPM_DIR" && [ -f package.json ] || echo '{"private":true}' >package.json
     timeout 240 npm install --no-audit --no-fund openai ollama @langchain/ollama @langchain/core \
       @langchain/openai ai @ai-sdk/openai-compatible @ai-sdk/openai ajv ajv-formats >"$TMP/npm.log" 2>&1)
  fi
  if [ -d "$NPM_DIR/node_modules/openai" ] && [ -d "$NPM_DIR/node_modules/ajv-formats" ]; then
    timeout 240 node "$HERE/openai_client_test.mjs" "$URL" "$KEY" "$NPM_DIR" >"$TMP/node.out" 2>&1
    rc=$?
    grep -v '^openai_client:' "$TMP/node.out" | head -n 40
    tail -n 1 "$TMP/node.out"
    check openai_client $rc
  else
    echo "skip openai client: npm install failed: $(tail -n 3 "$TMP/npm.log")"; skipped=1
  fi
  # The other clients check the API's shape, which the sanitizers don't change: they run in
  # the native stage; under ASan (CPULM_TEST_SANITIZED) the openai client alone drives the
  # instrumented server (they were ~40% of its ASan time).
  if [ "${CPULM_TEST_SANITIZED:-0}" = 1 ]; then
    echo "ollama, langchain and ai-sdk clients: native stage only (sanitized build)"
  elif [ -d "$NPM_DIR/node_modules/openai" ] && [ -d "$NPM_DIR/node_modules/ajv-formats" ]; then
    timeout 240 node "$HERE/ollama_client_test.mjs" "$URL" "$KEY" "$NPM_DIR" >"$TMP/ollama.out" 2>&1
    rc=$?
    grep -v '^ollama_client:' "$TMP/ollama.out" | head -n 40
    tail -n 1 "$TMP/ollama.out"
    check ollama_client $rc
    timeout 240 node "$HERE/langchain_ollama_test.mjs" "$URL" "$KEY" "$NPM_DIR" >"$TMP/lc.out" 2>&1
    rc=$?
    grep -v '^langchain_ollama:' "$TMP/lc.out" | head -n 40
    tail -n 1 "$TMP/lc.out"
    check langchain_ollama $rc
    for t in langchain_openai ai_sdk_client:compatible ai_sdk_client:openai; do
      timeout 240 node "$HERE/${t%%:*}_test.mjs" "$URL" "$KEY" "$NPM_DIR" chat ${t#*:} >"$TMP/$t.out" 2>&1
      rc=$?
      grep -v "^${t%%:*}:\|^ai_sdk_openai:" "$TMP/$t.out" | head -n 40
      tail -n 1 "$TMP/$t.out"
      check "$t" $rc
    done
  fi
fi

kill -TERM "$SPID"; wait "$SPID"; check main_exit_0 $?

# ---- the RAM prompt cache: a long chat seen before, a dozen others in between, both slots
# reused; the repeat is restored from RAM (cached_tokens, vLLM prefix-cache counters) ----
pc_chat() { # system-prompt salt -> prints the response
  local words
  words=$(for i in $(seq 120); do printf 'word%d%s ' $((i * 7 % 97)) "$1"; done)
  curl -s $URL/v1/chat/completions -d "{\"messages\":[{\"role\":\"system\",\"content\":\"$words\"},
    {\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":4,\"temperature\":0}"
}
# the others in between: a dozen; 4 under ASan (CPULM_TEST_SANITIZED, set by ctest there: each
# is a ~350-token prefill, minutes in all), which still reuse both slots twice
N_OTHER=12
[ "${CPULM_TEST_SANITIZED:-0}" = 1 ] && N_OTHER=4
for ram in 2048 0; do
  start_server "pc$ram" -np 2 -c 1024 -t 1 --cache-ram $ram
  check "pc${ram}_ready" $?
  URL=http://127.0.0.1:$PORT
  pc_chat a >"$TMP/pc_cold"
  for k in $(seq $N_OTHER); do pc_chat "x$k" >/dev/null; done
  pc_chat a >"$TMP/pc_warm"
  if [ $ram -gt 0 ]; then
    jq -e '.usage.prompt_tokens > 300 and
           .usage.prompt_tokens_details.cached_tokens >= .usage.prompt_tokens - 32' "$TMP/pc_warm" >/dev/null
    check prompt_cache_cached_tokens $? "$(jq -c .usage "$TMP/pc_warm")"
    [ "$(jq -r '.choices[0].message.content' "$TMP/pc_warm")" = "$(jq -r '.choices[0].message.content' "$TMP/pc_cold")" ]
    check prompt_cache_same_answer $?
    curl -s $URL/metrics >"$TMP/pc_metrics"
    hits=$(sed -n 's/^vllm:prefix_cache_hits_total{[^}]*} \([0-9]*\)$/\1/p' "$TMP/pc_metrics")
    [ "${hits:-0}" -ge 300 ]; check prompt_cache_hits_metric $? "(hits: $hits)"
    grep -q '^vllm:prefix_cache_queries_total{model_name="stories260K"} [1-9]' "$TMP/pc_metrics"
    check prompt_cache_queries_metric $?
    grep -q '^vllm:cache_config_info{.*block_size="32".*enable_prefix_caching="True".*} 1$' "$TMP/pc_metrics"
    check cache_config_info $?
  else
    jq -e '.usage.prompt_tokens_details.cached_tokens < 32' "$TMP/pc_warm" >/dev/null
    check prompt_cache_off $? "$(jq -c .usage "$TMP/pc_warm")"
  fi
  kill -TERM "$SPID"; wait "$SPID"
done

# ---- KV memory follows the tokens cached: 8 slots x 4096 tokens reserve 32k tokens of KV;
# a long prompt's pages are resident while it runs (cpulm_kv_bytes_resident, the kernel's
# count) and go back once it ends (--kv-idle 64: free slots keep at most 64 tokens) ----
start_server kvmem -np 8 -c 4096 -t 1 --cache-ram 0 --kv-idle 64 --kv-budget 20000
check kvmem_ready $?
URL=http://127.0.0.1:$PORT
kvm() { sed -n "s/^$1 \([0-9]*\)$/\1/p" "$TMP/kvm"; }
# /metrics into $TMP/kvm once the stream written to file $1 carries its first text (10 s at most)
kvm_while_streaming() {
  for _ in $(seq 500); do grep -q '"text"' "$1" && break; sleep 0.02; done
  curl -s $URL/metrics >"$TMP/kvm"
}
long=$(for i in $(seq 500); do printf 'w%d ' $((i % 97)); done)
curl -sN $URL/v1/completions -d "{\"prompt\":\"$long\",\"max_tokens\":1200,\"ignore_eos\":true,
  \"temperature\":0,\"stream\":true}" >"$TMP/kv_long" &
L=$!
kvm_while_streaming "$TMP/kv_long"
tok=$(kvm cpulm_kv_tokens_cached); used=$(kvm cpulm_kv_bytes_used)
res=$(kvm cpulm_kv_bytes_resident); resv=$(kvm cpulm_kv_bytes_reserved)
[ "$(kvm cpulm_requests_running)" = 1 ] && [ "${tok:-0}" -gt 1000 ] && [ "$res" -ge "$used" ] &&
  [ "$resv" -gt $((4 * res)) ]
check kv_resident_follows_long_prompt $? "(tokens $tok, used $used, resident $res, reserved $resv)"
# --kv-budget: the running request reserves its prompt + max_tokens (1,200) against it
bud=$(kvm cpulm_kv_budget_tokens); bused=$(kvm cpulm_kv_budget_used_tokens)
[ "$bud" = 20000 ] && [ "${bused:-0}" -gt 1200 ] && [ "$bused" -le 4096 ]
check kv_budget_reserved_by_running_request $? "(budget $bud, reserved $bused)"
wait $L
for _ in $(seq 200); do
  curl -s $URL/metrics >"$TMP/kvm"; [ "$(kvm cpulm_requests_running)" = 0 ] && break; sleep 0.02
done
tok2=$(kvm cpulm_kv_tokens_cached); res2=$(kvm cpulm_kv_bytes_resident)
[ "${tok2:-99}" -le 64 ] && [ "$res2" -lt $((res / 4)) ]
check kv_pages_return_after_long_prompt $? "(tokens $tok2, resident $res2, before $res)"
# n = 4 on the long prompt: the siblings map the prompt's KV pages (copy-on-write) instead of
# holding 4 copies, and every choice is what n = 1 with its seed (seed + index) gives
curl -sN $URL/v1/completions -d "{\"prompt\":\"$long\",\"n\":4,\"max_tokens\":200,
  \"ignore_eos\":true,\"temperature\":0.8,\"seed\":7,\"stream\":true}" >"$TMP/kv_n4" &
L=$!
kvm_while_streaming "$TMP/kv_n4"
tok=$(kvm cpulm_kv_tokens_cached); used=$(kvm cpulm_kv_bytes_used)
res=$(kvm cpulm_kv_bytes_resident); sh=$(kvm cpulm_kv_bytes_shared)
[ "$(kvm cpulm_requests_running)" = 1 ] && [ "${tok:-0}" -gt 4000 ] && [ "${sh:-0}" -gt 0 ] &&
  [ "$res" -lt $((used / 2)) ]
check kv_n4_prompt_held_once $? "(tokens $tok, used $used, resident $res, shared $sh)"
wait $L
for c in 0 3; do
  grep '^data: {' "$TMP/kv_n4" | sed 's/^data: //' |
    jq -j ".choices[]? | select(.index == $c) | .text" >"$TMP/kv_n4_$c"
  curl -s $URL/v1/completions -d "{\"prompt\":\"$long\",\"max_tokens\":200,\"ignore_eos\":true,
    \"temperature\":0.8,\"seed\":$((7 + c))}" | jq -j '.choices[0].text' >"$TMP/kv_n1_$c"
  [ -s "$TMP/kv_n1_$c" ] && cmp -s "$TMP/kv_n4_$c" "$TMP/kv_n1_$c"
  check kv_n4_choice${c}_equals_n1 $? "($(head -c 80 "$TMP/kv_n4_$c") / $(head -c 80 "$TMP/kv_n1_$c"))"
done
kill -TERM "$SPID"; wait "$SPID"

# ---- queue limit (429 + Retry-After) and the SIGTERM drain ----
start_server small -np 1 --max-queue 1 -c 2048 -t 1 --grace 60
check small_ready $?
URL=http://127.0.0.1:$PORT
curl -sN $URL/v1/completions -d '{"prompt":"Once","max_tokens":1000,"ignore_eos":true,"temperature":0,"stream":true}' >"$TMP/a" &
A=$!
for _ in $(seq 200); do [ -s "$TMP/a" ] && break; sleep 0.02; done
curl -s $URL/v1/completions -d '{"prompt":"The dog","max_tokens":8,"temperature":0}' >"$TMP/b" &
B=$!
for _ in $(seq 200); do
  [ "$(curl -s $URL/metrics | sed -n 's/^cpulm_requests_waiting \([0-9]*\).*/\1/p')" = 1 ] && break; sleep 0.02
done
curl -s -D "$TMP/c_head" -o "$TMP/c" $URL/v1/completions -d '{"prompt":"The cat","max_tokens":8}'
head -n 1 "$TMP/c_head" | grep -q ' 429 '; check queue_full_429 $?
grep -qi '^Retry-After: 1' "$TMP/c_head"; check retry_after $?
jq -e '.error.type == "rate_limit_error"' "$TMP/c" >/dev/null; check queue_full_error_json $?
kill -TERM "$SPID"
wait "$A" "$B"
wait "$SPID"; check drain_exit_0 $?
[ "$(tail -n 2 "$TMP/a" | head -n 1)" = "data: [DONE]" ]; check drain_stream_finished $?
jq -e '.usage.completion_tokens == 8' "$TMP/b" >/dev/null; check drain_queued_finished $?

# ---- POST /v1/embeddings (--embeddings, mean pooling): vectors equal `cpulm embed --json`,
# base64 decodes to the same float32s, token inputs, usage, errors; then the openai client ----
start_server emb -np 1 -c 256 -t 1 --api-key $KEY --embeddings --pooling mean
check emb_ready $?
URL=http://127.0.0.1:$PORT
"$CPULM" embed -m "$MODEL" -p "Once upon a time" -p "The cat" --pooling mean --json >"$TMP/emb_cli.json" 2>/dev/null
check emb_cli_rc $?
curl -s -H "$AUTH" $URL/v1/embeddings -d '{"input":["Once upon a time","The cat"],"model":"x"}' >"$TMP/emb.json"
jq -e --slurpfile cli "$TMP/emb_cli.json" '.object == "list" and (.data | length) == 2 and
    ([range(2) as $i | [.data[$i].embedding, $cli[0].data[$i].embedding] | transpose[] | (.[0] - .[1]) | fabs]
     | max) < 1e-5 and all(.data[]; .object == "embedding" and ((.embedding | map(. * .) | add) - 1 | fabs) < 1e-4)
    and .data[1].index == 1 and .usage.prompt_tokens > 2 and .usage.total_tokens == .usage.prompt_tokens
    and .model == "stories260K"' "$TMP/emb.json" >/dev/null
check emb_matches_cli $? "$(head -c 300 "$TMP/emb.json")"
curl -s -H "$AUTH" $URL/v1/embeddings -d '{"input":"The cat","encoding_format":"base64"}' >"$TMP/emb64.json"
jq -r '.data[0].embedding' "$TMP/emb64.json" | base64 -d | od -An -v -tf4 | tr -s ' ' '\n' | sed '/^$/d' >"$TMP/emb64.txt"
jq -r '.data[1].embedding[]' "$TMP/emb.json" >"$TMP/emb_f.txt"
[ "$(wc -l <"$TMP/emb64.txt")" -eq "$(wc -l <"$TMP/emb_f.txt")" ] &&
  paste "$TMP/emb64.txt" "$TMP/emb_f.txt" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-6) bad = 1 } END { exit bad }'
check emb_base64_same_floats $? "$(head -c 200 "$TMP/emb64.json")"
curl -s -H "$AUTH" $URL/v1/embeddings -d '{"input":[[1,400,300],[1,300]]}' >"$TMP/emb_tok.json"
curl -s -H "$AUTH" $URL/v1/embeddings -d '{"input":[1,300]}' >"$TMP/emb_tok1.json"
jq -e --slurpfile one "$TMP/emb_tok1.json" '(.data | length) == 2 and .usage.prompt_tokens == 5 and
    .data[1].embedding == $one[0].data[0].embedding' "$TMP/emb_tok.json" >/dev/null
check emb_token_inputs $?
for bad in '{"input":5}' '{"input":""}' '{"input":[]}' '{"input":["a",""]}' '{"input":[999999]}' \
           '{"input":"a","encoding_format":"hex"}' '{"input":"a","dimensions":8}' 'not json'; do
  code=$(curl -s -o "$TMP/emb_bad" -w '%{http_code}' -H "$AUTH" $URL/v1/embeddings -d "$bad")
  [ "$code" = 400 ] && jq -e '.error.type == "invalid_request_error"' "$TMP/emb_bad" >/dev/null
  check "emb_400 $bad" $? "($code $(head -c 200 "$TMP/emb_bad"))"
done
[ "$(curl -s -o /dev/null -w '%{http_code}' $URL/v1/embeddings -d '{"input":"a"}')" = 401 ]
check emb_needs_key $?
# Ollama's /api/embed: the same vectors in its shape
curl -s -H "$AUTH" $URL/api/embed -d '{"model":"x","input":["Once upon a time","The cat"]}' >"$TMP/oemb.json"
jq -e --slurpfile v1 "$TMP/emb.json" '.model == "x" and (.embeddings | length) == 2 and
    .embeddings == [$v1[0].data[].embedding] and .prompt_eval_count == $v1[0].usage.prompt_tokens' "$TMP/oemb.json" >/dev/null
check ollama_embed $? "$(head -c 200 "$TMP/oemb.json")"
curl -s -H "$AUTH" $URL/api/embed -d '{"model":"x","input":""}' >"$TMP/oemb_bad.json"
jq -e '.error | type == "string"' "$TMP/oemb_bad.json" >/dev/null; check ollama_embed_error $?
SANITIZED=${CPULM_TEST_SANITIZED:-0}
if [ "$SANITIZED" != 1 ] && [ -d "${NPM_DIR:-}/node_modules/ollama" ] && command -v node >/dev/null; then
  timeout 120 node "$HERE/ollama_client_test.mjs" "$URL" "$KEY" "$NPM_DIR" embed >"$TMP/ollama_emb.out" 2>&1
  rc=$?
  tail -n 20 "$TMP/ollama_emb.out"
  check ollama_client_embed $rc
fi
if [ -d "${NPM_DIR:-}/node_modules/openai" ] && command -v node >/dev/null; then
  timeout 120 node "$HERE/openai_embed_test.mjs" "$URL" "$KEY" "$NPM_DIR" "$TMP/emb_cli.json" >"$TMP/node_emb.out" 2>&1
  rc=$?
  cat "$TMP/node_emb.out" | tail -n 20
  check openai_embeddings $rc
else
  echo "skip openai embeddings client: the openai package is not installed"; skipped=1
fi
for t in langchain_openai:@langchain/openai:- ai_sdk_client:@ai-sdk/openai-compatible:compatible \
         ai_sdk_client:@ai-sdk/openai:openai; do
  IFS=: read -r name pkg flavor <<<"$t"
  [ "$SANITIZED" != 1 ] && [ -d "${NPM_DIR:-}/node_modules/$pkg" ] && command -v node >/dev/null || continue
  timeout 120 node "$HERE/${name}_test.mjs" "$URL" "$KEY" "$NPM_DIR" embed "$flavor" >"$TMP/emb_$flavor.out" 2>&1
  rc=$?
  tail -n 20 "$TMP/emb_$flavor.out"
  check "${name}_${flavor}_embed" $rc
done
# llama-server's /embedding: [{index, embedding: [[...]]}], the same vectors; embd_normalize
curl -s -H "$AUTH" $URL/embedding -d '{"content":["Once upon a time","The cat"]}' >"$TMP/lemb.json"
jq -e --slurpfile v1 "$TMP/emb.json" 'length == 2 and .[1].index == 1 and
    [.[].embedding | (length == 1), .[0]] == [$v1[0].data[].embedding | true, .]' "$TMP/lemb.json" >/dev/null
check llama_embedding $? "$(head -c 200 "$TMP/lemb.json")"
curl -s -H "$AUTH" $URL/embeddings -d '{"input":"The cat","embd_normalize":-1}' >"$TMP/lemb_raw.json"
jq -e --slurpfile v1 "$TMP/emb.json" '(.[0].embedding[0] | (map(. * .) | add | sqrt) as $n | map(. / $n)) as $u |
    ([$u, $v1[0].data[1].embedding] | transpose | map(.[0] - .[1] | fabs) | max) < 1e-5 and
    (.[0].embedding[0] | map(. * .) | add) > 1.01' "$TMP/lemb_raw.json" >/dev/null
check llama_embedding_unnormalized $? "$(head -c 200 "$TMP/lemb_raw.json")"
for n in 0 1 3; do
  curl -s -H "$AUTH" $URL/embedding -d "{\"content\":\"The cat\",\"embd_normalize\":$n}" |
    jq -e --argjson n $n '.[0].embedding[0] | map(fabs) | if $n == 0 then (max | . == 32760)
      elif $n == 1 then ((add - 1) | fabs) < 1e-5 else ((map(pow(.; 3)) | add) - 1 | fabs) < 1e-4 end' >/dev/null
  check "llama_embedding_norm_$n" $?
done
http_status 400 -H "$AUTH" $URL/embedding -d '{"content":"a","embd_normalize":"x"}' &&
  jq -e '.error.code == 400 and (.error.message | contains("embd_normalize"))' "$TMP/err" >/dev/null
check llama_embedding_bad_norm $?
kill -TERM "$SPID"; wait "$SPID"
start_server embnone -np 1 -c 256 -t 1 --embeddings --pooling none --no-slots
check embnone_ready $?
URL=http://127.0.0.1:$PORT
code=$(curl -s -o "$TMP/emb_none" -w '%{http_code}' $URL/v1/embeddings -d '{"input":"a"}')
[ "$code" = 400 ] && grep -q 'pooling is none' "$TMP/emb_none"; check emb_pooling_none_400 $? "$code"
[ "$(curl -s -o /dev/null -w '%{http_code}' -H "$AUTH" $URL/api/embed -d '{"input":"a"}')" = 400 ]
check ollama_embed_pooling_none_400 $?
code=$(curl -s -o "$TMP/emb_off" -w '%{http_code}' $URL/v1/completions -d '{"prompt":"a","max_tokens":2}')
[ "$code" = 200 ]; check emb_server_still_generates $?
http_status 400 $URL/embedding -d '{"content":"a"}' && grep -q 'pooling is none' "$TMP/err"
check llama_embedding_pooling_none_400 $?
http_status 501 $URL/slots; check slots_off_501 $?
kill -TERM "$SPID"; wait "$SPID"
# Mistral v11+ tool calls ([TOOL_CALLS]NAME[ARGS]{...}): with such a template a forced call
# is generated in that form and comes back as tool_calls, whole and streamed (no content)
cat >"$TMP/mistral_v11.jinja" <<'JINJA'
{{- bos_token }}{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' and m.tool_calls is defined %}{%- for c in m.tool_calls %}[TOOL_CALLS]
{{- c.function.name }}[ARGS]{{ c.function.arguments | tojson }}{%- endfor %}{{ eos_token }}
{%- elif m.role == 'assistant' %}{{ m.content }}{{ eos_token }}
{%- elif m.role == 'tool' %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{%- endif %}{%- endfor %}
JINJA
start_server mv11 -np 2 -c 512 -t 1 --chat-template "$TMP/mistral_v11.jinja"
check mv11_ready $?
URL=http://127.0.0.1:$PORT
mv11_req='{"messages":[{"role":"user","content":"Weather?"}],"tool_choice":"required","max_tokens":80,
  "temperature":0.9,"seed":1,"tools":[{"type":"function","function":{"name":"get_weather","parameters":
  {"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}}}]'
curl -s $URL/v1/chat/completions -d "$mv11_req}" >"$TMP/mv11.json"
jq -e '.choices[0].finish_reason == "tool_calls" and .choices[0].message.content == null and
    .choices[0].message.tool_calls[0].function.name == "get_weather" and
    (.choices[0].message.tool_calls[0].function.arguments | fromjson | .city | type) == "string"' "$TMP/mv11.json" >/dev/null
check mistral_v11_forced_call $? "$(head -c 300 "$TMP/mv11.json")"
curl -sN $URL/v1/chat/completions -d "$mv11_req,\"stream\":true}" | sed -n 's/^data: \({.*\)$/\1/p' |
  jq -s -e --slurpfile w "$TMP/mv11.json" '([.[].choices[0].delta.content // ""] | add) == "" and
    ([.[].choices[0].delta.tool_calls[]?.function.arguments] | add) == $w[0].choices[0].message.tool_calls[0].function.arguments' >/dev/null
check mistral_v11_streamed_call $?
kill -TERM "$SPID"; wait "$SPID"
# llama-server's /infill on a model with fill-in-the-middle tokens (a tiny synthetic one whose
# last three tokens are <|fim_prefix|>, <|fim_suffix|>, <|fim_middle|>): the prompt is
# [BOS] <PRE> input_prefix prompt <SUF> input_suffix <MID>, each part tokenized alone, so
# its answer equals /completion's on those token ids
"$CPULM" synth --shape tiny --type q8_0 --fim -o "$TMP/fim.gguf" >/dev/null 2>&1
check fim_synth $?
MODEL_SAVED=$MODEL MODEL=$TMP/fim.gguf
start_server fim -np 1 -c 256 -t 1
check fim_ready $?
MODEL=$MODEL_SAVED
URL=http://127.0.0.1:$PORT
fim_ids() { curl -s $URL/tokenize -d "$(jq -n --arg c "$1" '{content: $c, parse_special: false}')" | jq -c '.tokens'; }
ids=$(jq -n -c --argjson p "$(fim_ids 'The cat')" --argjson m "$(fim_ids ' and')" --argjson s "$(fim_ids 'the dog')" \
  --argjson bos "$(curl -s $URL/tokenize -d '{"content":"","add_special":true}' | jq -c '.tokens')" \
  '$bos + [509] + $p + $m + [510] + $s + [511]')
sampling='"n_predict":10,"temperature":0,"logit_bias":[[511,false],[510,false],[509,false],[2,false]]'
curl -s $URL/infill -d "{\"input_prefix\":\"The cat\",\"prompt\":\" and\",\"input_suffix\":\"the dog\",$sampling}" >"$TMP/infill.json"
curl -s $URL/completion -d "{\"prompt\":$ids,$sampling}" >"$TMP/infill_ref.json"
jq -e --slurpfile r "$TMP/infill_ref.json" --argjson ids "$ids" '.tokens_evaluated == ($ids | length) and
    .tokens_evaluated == $r[0].tokens_evaluated and .content == $r[0].content and
    (.content | length) > 0 and .stop_type == "limit"' "$TMP/infill.json" >/dev/null
check infill_prompt_layout $? "$(head -c 300 "$TMP/infill.json") vs $(head -c 200 "$TMP/infill_ref.json")"
curl -sN $URL/infill -d "{\"input_prefix\":\"The cat\",\"prompt\":\" and\",\"input_suffix\":\"the dog\",\"stream\":true,$sampling}" |
  sed -n 's/^data: //p' | jq -s -e --slurpfile w "$TMP/infill.json" '([.[].content] | add) == $w[0].content and .[-1].stop == true' >/dev/null
check infill_stream $?
http_status 400 $URL/infill -d '{"input_prefix":"a","input_extra":[{"filename":"a.py","text":"x"}]}' &&
  grep -q input_extra "$TMP/err"; check infill_extra_400 $?
http_status 400 $URL/infill -d '{"input_prefix":5}' && grep -q input_prefix "$TMP/err"; check infill_bad_prefix_400 $?
kill -TERM "$SPID"; wait "$SPID"
# llama-server's GET /slots: one entry per slot; a running request shows; with
# ?fail_on_no_slot=1 a server whose only slot is busy answers 503
start_server slots -np 1 -c 2048 -t 1
check slots_ready $?
URL=http://127.0.0.1:$PORT
curl -s $URL/slots | jq -e '. == [{"id":0,"n_ctx":2048,"speculative":false,"is_processing":false}]' >/dev/null
check slots_idle $?
http_status 200 "$URL/slots?fail_on_no_slot=1"; check slots_free_200 $?
curl -s -o /dev/null $URL/v1/completions -d '{"prompt":"Once","max_tokens":2040,"ignore_eos":true}' &
busy=1
for _ in $(seq 400); do
  code=$(curl -s -o "$TMP/slots_busy" -w '%{http_code}' "$URL/slots?fail_on_no_slot=1")
  [ "$code" = 503 ] && { busy=0; break; }
  sleep 0.01
done
[ $busy = 0 ] && jq -e '.error.code == 503' "$TMP/slots_busy" >/dev/null; check slots_busy_503 $?
wait $!
curl -s $URL/slots | jq -e '.[0].is_processing == false' >/dev/null; check slots_idle_again $?
kill -TERM "$SPID"; wait "$SPID"

# ---- no request holds up the others (issue 25): a 2,048-input (~200 KB, ~50k tokens) embedding request is
# tokenized on a heavy-lane request worker and embedded in batches between the scheduler's
# steps, so meanwhile a short completion gets its first token within 1 s of its time alone
# and /health answers within 100 ms; a client that disconnects has its embedding stopped at
# the next batch (within ISO_FREE_S); SIGTERM with --grace 2 exits within 4 s whatever is in flight ----
start_server iso -np 2 -c 512 -t 1 --embeddings --pooling mean --grace 2 --max-body 16000000
check iso_ready $?
URL=http://127.0.0.1:$PORT
jq -n '{input: [range(2048) | "\(.) Once upon a time there was a little girl named Lily. She liked to play."]}' >"$TMP/iso_big.json"
# for the SIGTERM: 3x the tokens, so it is still running when the grace period ends
jq -n '{input: [range(2048) | "\(.) " + ("Once upon a time there was a little girl named Lily. She liked to play. " * 6)]}' >"$TMP/iso_long.json"
iso_m() { curl -s $URL/metrics | sed -n "s/^$1 \([0-9][0-9.e+]*\)$/\1/p"; }
iso_ttft() { # seconds to the first streamed token of a short completion (99: none in 10 s)
  local t
  t=$(curl -sN -o /dev/null -w '%{time_starttransfer}' --max-time 10 $URL/v1/completions \
    -d '{"prompt":"Once upon a time","max_tokens":4,"temperature":0,"stream":true}') || t=99
  echo "$t"
}
iso_le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; } # a <= b (floats)
iso_health() { # the median of 3 /health times (one sample is at the mercy of the OS scheduler)
  for _ in 1 2 3; do curl -s -o /dev/null -w '%{time_total}\n' --max-time 10 $URL/health || echo 99; done |
    sort -n | sed -n 2p
}
iso_big() { # starts the big embedding request (file $1) in the background: EB its curl
  curl -s -o "$TMP/iso_big.out" -w '%{http_code} %{time_total}' --max-time 120 $URL/v1/embeddings -d @"$1" >"$TMP/iso_big.code" &
  EB=$!
}
iso_embedding() { # waits (at most 3 s) until the scheduler embeds; a server without the metric times out
  for _ in $(seq 60); do [ "$(iso_m cpulm_embed_requests_running)" = 1 ] && return 0; sleep 0.05; done
  return 1
}
# how soon a disconnect must free the worker: 1 s (1.5 s in a sanitizer build). The server
# takes 15-90 ms (release, load 12; polled on a keep-alive connection), but each poll here
# spawns a curl, and on a 2-core machine at load 25 that alone took 0.5-0.8 s; before issue
# 25 the work ran on for 14-17 s
# and the exit after SIGTERM with --grace 2: 4 s (6 s in a sanitizer build: 2.2-3.0 s at load
# 12-14, 5.6 s once at load 25, where its exit, leak scan included, is slow); before issue
# 25: 12-72 s
ISO_FREE_S=1.0 ISO_EXIT_S=4.0
ldd "$CPULM" 2>/dev/null | grep -q -e libasan -e libubsan && ISO_FREE_S=1.5 ISO_EXIT_S=6.0
alone=$( (iso_ttft; iso_ttft; iso_ttft) | sort -n | head -n 1)
iso_big "$TMP/iso_big.json"
iso_embedding; check iso_embedding_in_scheduler $?
during=$(iso_ttft)
iso_le "$during" "$(awk -v a="$alone" 'BEGIN { print a + 1.0 }')"
check iso_ttft_during_embedding $? "(alone ${alone}s, during ${during}s)"
h=$(iso_health)
iso_le "$h" 0.1; check iso_health_during_embedding $? "(${h}s)"
[ "$(iso_m cpulm_embed_requests_running)" = 1 ]; check iso_embedding_still_running $?
# disconnect: the scheduler drops the request at its next batch (the gauge falls to 0 and the
# inputs counter stops), and the next request is served at once
kill "$EB" 2>/dev/null; wait "$EB" 2>/dev/null
t0=$(date +%s.%N)
for _ in $(seq 300); do [ "$(iso_m cpulm_embed_requests_running)" = 0 ] && break; sleep 0.005; done
stopped=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
n1=$(iso_m cpulm_embed_inputs_total); sleep 0.3; n2=$(iso_m cpulm_embed_inputs_total)
iso_le "$stopped" "$ISO_FREE_S" && [ -n "$n1" ] && [ "$n1" = "$n2" ] && [ "$n1" -lt 2048 ]
check iso_disconnect_stops_embedding $? "(gauge 0 after ${stopped}s; inputs $n1 then $n2)"
after=$(iso_ttft)
iso_le "$after" "$(awk -v a="$alone" 'BEGIN { print a + 1.0 }')"
check iso_ttft_after_disconnect $? "(alone ${alone}s, after ${after}s)"
# an 8 MB prompt (seconds of tokenizing) on a heavy-lane worker: a short completion passes
# it, and when its client disconnects the tokenizer stops (the worker is free) within ISO_FREE_S
jq -n '{prompt: ("Once upon a time there was a little girl named Lily. " * 150000), max_tokens: 1}' >"$TMP/iso_huge.json"
curl -s -o /dev/null --max-time 60 $URL/v1/completions -d @"$TMP/iso_huge.json" &
HP=$!
for _ in $(seq 100); do [ "$(iso_m cpulm_prep_running)" = 1 ] && break; sleep 0.02; done
sleep 1 # past parsing the JSON (not interruptible; ~1 s under the sanitizers), into tokenizing
mid=$(iso_ttft)
iso_le "$mid" "$(awk -v a="$alone" 'BEGIN { print a + 1.0 }')"
check iso_ttft_while_huge_prompt $? "(alone ${alone}s, during ${mid}s)"
h2=$(iso_health)
iso_le "$h2" 0.1; check iso_health_while_huge_prompt $? "(${h2}s)"
[ "$(iso_m cpulm_prep_running)" = 1 ]; check iso_huge_prompt_still_tokenizing $?
kill "$HP" 2>/dev/null; wait "$HP" 2>/dev/null
t0=$(date +%s.%N)
for _ in $(seq 300); do [ "$(iso_m cpulm_prep_running)" = 0 ] && break; sleep 0.005; done
freed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
iso_le "$freed" "$ISO_FREE_S" && [ "$(iso_m cpulm_prep_running)" = 0 ]
check iso_disconnect_stops_tokenizing $? "(worker free after ${freed}s)"
# a slow grammar (issue 25 case 2): 15 x "a"{0,4096} (61,440 rules: 14 s of the only request
# worker before the fix, everyone queued behind it) compiled over and over on the heavy lane,
# each one new (a literal of its own, so the cache never answers): meanwhile a short
# completion's first token (median of 3) and /health are as in the other cases
g15=$(printf ' "a"{0,4096}%.0s' $(seq 15))
for i in $(seq 40); do
  jq -n --arg g "root ::= \"g$i\"$g15" '{prompt:"a",max_tokens:2,temperature:0,grammar:$g}' >"$TMP/iso_g$i.json"
done
iso_grammars() { # posts the slow grammars one after another in the background: GL its loop
  (for i in $(seq 40); do
    [ -f "$TMP/iso_g.stop" ] && break
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 60 $URL/v1/completions -d @"$TMP/iso_g$i.json"
  done >"$TMP/iso_g.log") &
  GL=$!
}
iso_compiling() { # waits (at most 3 s) until a request worker prepares one
  for _ in $(seq 150); do [ "$(iso_m cpulm_prep_running)" = 1 ] && return 0; sleep 0.02; done
  return 1
}
rm -f "$TMP/iso_g.stop"
iso_grammars
iso_compiling; check iso_grammar_compiling $?
gram=$( (iso_ttft; iso_ttft; iso_ttft) | sort -n | sed -n 2p)
iso_le "$gram" "$(awk -v a="$alone" 'BEGIN { print a + 1.0 }')"
check iso_ttft_during_slow_grammar $? "(alone ${alone}s, during ${gram}s)"
hg=$(iso_health)
iso_le "$hg" 0.1; check iso_health_during_slow_grammar $? "(${hg}s)"
touch "$TMP/iso_g.stop"; wait "$GL"
ng=$(grep -c '^200 ' "$TMP/iso_g.log")
gms=$(awk '$1 == 200 { print $2 }' "$TMP/iso_g.log" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
[ "$ng" -ge 1 ] && [ "$ng" = "$(wc -l <"$TMP/iso_g.log")" ]
check iso_slow_grammars_answered $? "($ng answered: $(tr '\n' ' ' <"$TMP/iso_g.log"))"
# SIGTERM with --grace 2 while the big request is being tokenized, then embedded, and slow
# grammars compile: a short completion sent while it is tokenized is not queued behind it; a
# stream admitted before the signal got its first token as fast and runs to its end within
# the grace; /health is refused at once (the listener closes); the embedding client gets a
# 503 when the grace period ends; the process exits within grace + 2 s
big0=$(date +%s.%N)
iso_big "$TMP/iso_long.json"
sleep 0.1
early=$(iso_ttft)
iso_le "$early" "$(awk -v a="$alone" 'BEGIN { print a + 1.0 }')"
check iso_ttft_while_tokenizing $? "(alone ${alone}s, during ${early}s)"
iso_embedding; check iso_embedding_in_scheduler_at_sigterm $?
rm -f "$TMP/iso_g.stop"
iso_grammars
iso_compiling; check iso_grammar_compiling_at_sigterm $?
curl -sN -o "$TMP/iso_st.out" -w '%{time_starttransfer}' --max-time 20 $URL/v1/completions \
  -d '{"prompt":"Once upon a time","max_tokens":8,"ignore_eos":true,"temperature":0,"stream":true}' >"$TMP/iso_st.t" &
ST=$!
for _ in $(seq 200); do grep -q '"text"' "$TMP/iso_st.out" 2>/dev/null && break; sleep 0.01; done
t0=$(date +%s.%N)
kill -TERM "$SPID"
# (refused: the listener is closed; a probe that reached it just before the signal was read
# may still be answered, or reset with the listener's queue: either way at once)
hs=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 2 $URL/health); hrc=$?
hcode=${hs% *} hs=${hs#* }
wait "$ST"; src=$?
stend=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
wait "$SPID"; rc=$?
took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
wait "$EB"
touch "$TMP/iso_g.stop"; wait "$GL"
# the embedding client: 503 if its request was still running when the grace ended; a 200 only
# if it was answered within the grace (inputs twice as long outlast it: the shorter ones of
# the other cases finished inside it on a Zen 5, where they rightly got their 200)
read -r bcode btime <"$TMP/iso_big.code"
bok=$(awk -v c="$bcode" -v s="$big0" -v d="$btime" -v t="$t0" \
  'BEGIN { print (c == 503 || (c == 200 && s + d <= t + 2.25)) ? 1 : 0 }')
[ "$rc" = 0 ] && iso_le "$took" "$ISO_EXIT_S" && [ "$bok" = 1 ]
check iso_sigterm_exits_within_grace $? "(rc $rc, exit after ${took}s, embedding client $bcode after ${btime}s)"
stt=$(cat "$TMP/iso_st.t")
[ "$src" = 0 ] && iso_le "$stt" "$(awk -v a="$alone" 'BEGIN { print a + 1.0 }')" && iso_le "$stend" 2.0 &&
  sed -n 's/^data: \({.*\)$/\1/p' "$TMP/iso_st.out" | jq -s -e '([.[].choices[0].text] | join("") | length) > 0 and
    .[-1].choices[0].finish_reason == "length"' >/dev/null && [ "$(grep -v '^$' "$TMP/iso_st.out" | tail -n 1)" = "data: [DONE]" ]
check iso_stream_through_sigterm $? "(curl rc $src, first token ${stt}s, ended ${stend}s after SIGTERM: $(tail -c 150 "$TMP/iso_st.out"))"
case "$hrc:$hcode" in 7:000 | 5[26]:000 | 0:200) iso_le "$hs" 0.1 ;; *) false ;; esac
check iso_health_refused_at_sigterm $? "(curl rc $hrc, status $hcode, ${hs}s)"
echo "isolation: first token alone ${alone}s, during a 2,048-input embedding ${during}s, while it is tokenized ${early}s, while an 8 MB prompt is tokenized ${mid}s, while slow grammars compile ${gram}s (each answered in ${gms}s); /health ${h}s, ${h2}s and ${hg}s, refused ${hs}s after SIGTERM; embedding stopped ${stopped}s and tokenizing ${freed}s after the disconnect; a stream admitted before SIGTERM ended ${stend}s after it; exit ${took}s after SIGTERM (--grace 2), the embedding running at SIGTERM answered $bcode after ${btime}s"

# ---- Qwen3-style reasoning: a template that opens <think> (unless enable_thinking is false)
# on tiny-qwen3 (random weights, so the reply never closes the block): the whole reply is
# reasoning_content, equal to the raw completion of the same prompt; with
# chat_template_kwargs.enable_thinking=false the template closes the block and the same
# raw text is the content ----
QMODEL=$SHARED/testdata/models/tiny-qwen3-q8_0.gguf
if [ -f "$QMODEL" ]; then
  printf '%s' '{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
{% if enable_thinking is defined and enable_thinking is false %}<think>

</think>

{% else %}<think>
{% endif %}' >"$TMP/qwen3.jinja"
  MODEL_SAVE=$MODEL; MODEL=$QMODEL
  start_server think -np 2 -c 512 -t 1 --chat-template "$TMP/qwen3.jinja"
  check think_ready $?
  MODEL=$MODEL_SAVE
  URL=http://127.0.0.1:$PORT
  CHAT='"messages":[{"role":"user","content":"Hi"}],"max_tokens":16,"temperature":0'
  curl -s $URL/v1/chat/completions -d "{$CHAT}" >"$TMP/th_chat"
  curl -sN $URL/v1/chat/completions -d "{$CHAT,\"stream\":true}" >"$TMP/th_sse"
  curl -s $URL/v1/chat/completions -d "{$CHAT,\"chat_template_kwargs\":{\"enable_thinking\":false}}" >"$TMP/th_off"
  raw_of() { # prompt text -> raw completion JSON
    curl -s $URL/v1/completions -d "$(jq -n --arg p "$1" '{prompt:$p,max_tokens:16,temperature:0}')"
  }
  raw_of $'<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n' >"$TMP/th_raw"
  raw_of $'<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' >"$TMP/th_raw_off"
  # the raw text never closes the block here (else the expectations below would not hold)
  jq -e '(.choices[0].text | contains("</think>") | not) and .usage.completion_tokens == 16' "$TMP/th_raw" >/dev/null
  check think_raw_premise $? "$(head -c 300 "$TMP/th_raw")"
  jq -e --slurpfile raw "$TMP/th_raw" '.choices[0].message.content == "" and
      .choices[0].message.reasoning_content == ($raw[0].choices[0].text | sub("^[ \n]+"; "") | sub("[ \n]+$"; ""))
      and .usage.prompt_tokens == $raw[0].usage.prompt_tokens' "$TMP/th_chat" >/dev/null
  check think_reasoning_content $? "$(head -c 400 "$TMP/th_chat")"
  sed -n 's/^data: \({.*\)$/\1/p' "$TMP/th_sse" | jq -s --slurpfile raw "$TMP/th_raw" -e '
      ([.[].choices[].delta.reasoning_content // ""] | join("")) == ($raw[0].choices[0].text | sub("^[ \n]+"; ""))
      and ([.[].choices[].delta.content // ""] | join("")) == ""
      and .[0].choices[0].delta.role == "assistant"' >/dev/null
  check think_stream_reasoning_deltas $? "$(head -c 400 "$TMP/th_sse")"
  jq -e --slurpfile raw "$TMP/th_raw_off" '.choices[0].message.content == $raw[0].choices[0].text and
      (.choices[0].message | has("reasoning_content") | not)
      and .usage.prompt_tokens == $raw[0].usage.prompt_tokens' "$TMP/th_off" >/dev/null
  check think_enable_thinking_false $? "$(head -c 400 "$TMP/th_off")"
  code=$(curl -s -o "$TMP/th_bad" -w '%{http_code}' $URL/v1/chat/completions -d "{$CHAT,\"chat_template_kwargs\":{\"enable_thinking\":1}}")
  [ "$code" = 400 ] && jq -e '.error.param == "enable_thinking"' "$TMP/th_bad" >/dev/null
  check think_kwargs_type_400 $?
  code=$(curl -s -o "$TMP/emb_off" -w '%{http_code}' $URL/v1/embeddings -d '{"input":"a"}')
  [ "$code" = 501 ] && grep -q -- '--embeddings' "$TMP/emb_off"; check emb_off_501 $? "$code"
  kill -TERM "$SPID"; wait "$SPID"
else
  echo "skip think checks: $QMODEL not found"; skipped=1
fi

echo "server_e2e: $pass passed, $fail failed${skipped:+, some parts skipped}"
[ $fail -eq 0 ] || exit 1
[ -z "${skipped:-}" ] || exit 77 # ctest lists the test as skipped
