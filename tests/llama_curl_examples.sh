#!/usr/bin/env bash
# llama_curl_examples.sh: the curl examples of llama-server's README (tools/server/README.md:
# "Using with CURL", /v1/chat/completions, /v1/embeddings, /v1/rerank), sent as documented
# (only host and port changed) to `cpulm serve`, each answer checked for the fields a client
# of llama-server reads. Synthetic models made here: tiny (llama) for text, tiny-bert for
# embeddings, tiny-bert with a classification head for rerank. The README's examples of
# routes cpulm does not serve (/v1/responses, /v1/messages, /v1/messages/count_tokens: "—" in
# docs/SERVER.md's compatibility table) and its multimodal embedding input are checked to
# be refused with a JSON error (404, 400), not to hang or crash.
# Usage: llama_curl_examples.sh path/to/cpulm. Servers bind 127.0.0.1 on a free port; the
# script kills only the PIDs it started; every wait loop is bounded.
set -u
CPULM=$1
. "$(dirname "$0")/lib.sh"
need_tools curl jq
"$CPULM" synth --shape tiny --type q8_0 -o "$TMP/text.gguf" >/dev/null 2>&1 &&
  "$CPULM" synth --shape tiny-bert --type f32 -o "$TMP/embed.gguf" >/dev/null 2>&1 &&
  "$CPULM" synth --shape tiny-bert --type f32 --rerank -o "$TMP/rerank.gguf" >/dev/null 2>&1
check synth $?

# start_server NAME MODEL ARGS...: lib_serve with one thread and a 512-token context.
start_server() {
  local name=$1 model=$2
  shift 2
  lib_serve "$name" "$model" -t 1 -c 512 "$@"
}

# ---- text: "Using with CURL" (/completion) and the /v1/chat/completions example ----
start_server text "$TMP/text.gguf"
check start_text $?
curl --request POST \
    --url http://127.0.0.1:$PORT/completion \
    --header "Content-Type: application/json" \
    --data '{"prompt": "Building a website can be done in 10 simple steps:","n_predict": 128}' >"$TMP/completion" 2>/dev/null
jq -e '(.content | type == "string") and .tokens_predicted >= 1 and .tokens_predicted <= 128 and .stop == true and
       (.timings | type == "object")' "$TMP/completion" >/dev/null
check readme_completion $? "$(head -c 300 "$TMP/completion")"

curl http://127.0.0.1:$PORT/v1/chat/completions \
-H "Content-Type: application/json" \
-H "Authorization: Bearer no-key" \
-d '{
"model": "gpt-3.5-turbo",
"messages": [
{
    "role": "system",
    "content": "You are ChatGPT, an AI assistant. Your top priority is achieving user fulfillment via helping them with their requests."
},
{
    "role": "user",
    "content": "Write a limerick about python exceptions"
}
]
}' >"$TMP/chat" 2>/dev/null
jq -e '.object == "chat.completion" and .choices[0].message.role == "assistant" and
       (.choices[0].message.content | type == "string") and .usage.total_tokens > 0' "$TMP/chat" >/dev/null
check readme_chat $? "$(head -c 300 "$TMP/chat")"

# README examples of routes cpulm does not serve: a JSON 404, promptly
code=$(curl -s -o "$TMP/resp" -w '%{http_code}' --max-time 10 http://127.0.0.1:$PORT/v1/responses \
-H "Content-Type: application/json" \
-H "Authorization: Bearer no-key" \
-d '{
"model": "gpt-4.1",
"instructions": "You are ChatGPT, an AI assistant. Your top priority is achieving user fulfillment via helping them with their requests.",
"input": "Write a limerick about python exceptions"
}')
[ "$code" = 404 ] && jq -e '.error.message' "$TMP/resp" >/dev/null
check readme_responses_404 $? "$code"
for path in /v1/messages /v1/messages/count_tokens; do
  code=$(curl -s -o "$TMP/resp" -w '%{http_code}' --max-time 10 http://127.0.0.1:$PORT$path \
    -H "Content-Type: application/json" \
    -H "x-api-key: your-api-key" \
    -d '{
      "model": "gpt-4",
      "max_tokens": 1024,
      "system": "You are a helpful assistant.",
      "messages": [
        {"role": "user", "content": "Hello!"}
      ]
    }')
  [ "$code" = 404 ] && jq -e '.error.message' "$TMP/resp" >/dev/null
  check "readme_anthropic_404 $path" $? "$code"
done

# ---- embeddings: the /v1/embeddings examples (input as string, as string array) ----
start_server embed "$TMP/embed.gguf" --embeddings
check start_embed $?
curl http://127.0.0.1:$PORT/v1/embeddings \
-H "Content-Type: application/json" \
-H "Authorization: Bearer no-key" \
-d '{
        "input": "hello",
        "model":"GPT-4",
        "encoding_format": "float"
}' >"$TMP/e1" 2>/dev/null
jq -e '.object == "list" and (.data | length) == 1 and (.data[0].embedding | length) == 128 and
       ([.data[0].embedding[] | . * .] | add | . > 0.999 and . < 1.001)' "$TMP/e1" >/dev/null
check readme_embeddings_string $? "$(head -c 300 "$TMP/e1")"
curl http://127.0.0.1:$PORT/v1/embeddings \
-H "Content-Type: application/json" \
-H "Authorization: Bearer no-key" \
-d '{
        "input": ["hello", "world"],
        "model":"GPT-4",
        "encoding_format": "float"
}' >"$TMP/e2" 2>/dev/null
jq -e '(.data | length) == 2 and .data[1].index == 1 and
       .data[0].embedding != .data[1].embedding and .usage.prompt_tokens >= 6' "$TMP/e2" >/dev/null
check readme_embeddings_array $? "$(head -c 300 "$TMP/e2")"
code=$(curl -s -o "$TMP/e3" -w '%{http_code}' --max-time 10 http://127.0.0.1:$PORT/v1/embeddings \
-H "Content-Type: application/json" \
-H "Authorization: Bearer no-key" \
-d '{
        "input": [
            { "content": [
                { "type": "text", "text": "hello" }
            ] }
        ],
        "encoding_format": "float"
}')
[ "$code" = 400 ] && jq -e '.error.message' "$TMP/e3" >/dev/null
check readme_embeddings_multimodal_400 $? "$code"

# ---- rerank: the /v1/rerank example ----
start_server rerank "$TMP/rerank.gguf" --rerank
check start_rerank $?
curl http://127.0.0.1:$PORT/v1/rerank \
    -H "Content-Type: application/json" \
    -d '{
        "model": "some-model",
            "query": "What is panda?",
            "top_n": 3,
            "documents": [
                "hi",
            "it is a bear",
            "The giant panda (Ailuropoda melanoleuca), sometimes called a panda bear or simply panda, is a bear species endemic to China."
            ]
    }' 2>/dev/null | jq >"$TMP/rr"
jq -e '.object == "list" and (.results | length) == 3 and ([.results[].index] | sort) == [0, 1, 2] and
       (.results[0].relevance_score >= .results[1].relevance_score) and
       (.results[1].relevance_score >= .results[2].relevance_score) and .usage.prompt_tokens > 0' "$TMP/rr" >/dev/null
check readme_rerank $? "$(head -c 300 "$TMP/rr")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
