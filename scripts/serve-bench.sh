#!/usr/bin/env bash
# serve-bench.sh: `cpulm serve` against llama-server on the serving workload of issue #16,
# same model, same threads, the two servers run one after the other (run it twice,
# swapping the order with ORDER="llama cpulm", in a quiet window; report ratios).
#   1. load: NP slots, C concurrent streaming users, N requests, unique ~W-word prompts,
#      M generated tokens each (cpulm loadtest; both servers see the same requests):
#      total throughput (prompt + output tokens / wall), inter-token gap p50/p99, TTFT p90;
#      for cpulm also its steps (long ones) and step model from /metrics;
#   2. prompt cache: one long prompt (~LW words), then K other long prompts, then the
#      first again: time to first token cold vs repeated, and cached_tokens.
# Usage: scripts/serve-bench.sh MODEL.gguf [out-dir]
# Env: NP=16 C=16 N=32 W=250 M=64 T=2 LW=1200 K=12 LLAMA=../shared/bench/llama.cpp
#      CTX=2048 (per slot; llama-server gets NP x CTX since its -c is the total)
#      ORDER="cpulm llama" CPULM=build/cpulm
#      CPULM_ARGS="" LLAMA_ARGS="" (extra server flags, e.g. CPULM_ARGS="--max-step-ms 150")
set -u
MODEL=$1
OUT=${2:-/tmp/serve-bench}
NP=${NP:-16} C=${C:-16} N=${N:-32} W=${W:-250} M=${M:-64} T=${T:-2}
LW=${LW:-1200} K=${K:-12} CTX=${CTX:-2048}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA=${LLAMA:-$ROOT/../shared/bench/llama.cpp}
CPULM=${CPULM:-$ROOT/build/cpulm}
ORDER=${ORDER:-cpulm llama}
PORT=${PORT:-18480}
mkdir -p "$OUT"
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT

wait_ready() { # url path
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "$1$2")" = 200 ] && return 0
    sleep 0.5
  done
  return 1
}

words() { # n salt: n pseudo-random words, different per salt from the first word on
  awk -v n="$1" -v s="$2" 'BEGIN { srand(s); printf "%s", "request" s;
    split("the a dog cat ran over house tree when big little happy sky river found friend play", w, " ");
    for (i = 1; i < n; i++) printf " %s", w[int(rand() * 16) + 1]; }'
}

# one streamed completion: prints "ttft_seconds cached_tokens prompt_tokens". The time is
# taken at the first SSE event carrying text (servers may send headers earlier).
one() { # url prompt
  local body t0 t1 usage
  body=$(jq -cn --arg p "$2" '{prompt: $p, max_tokens: 4, temperature: 0, stream: true,
                               stream_options: {include_usage: true}, cache_prompt: true}')
  t0=$(date +%s.%N)
  curl -sN -H 'Content-Type: application/json' -d "$body" "$1/v1/completions" | {
    while IFS= read -r line; do
      case $line in *'"text":'*) date +%s.%N >"$OUT/one.t1"; break ;; esac
    done
    cat >"$OUT/one.sse"
  }
  t1=$(cat "$OUT/one.t1")
  usage=$(grep '"usage"' "$OUT/one.sse" | grep -v '"usage":null' | tail -n 1 | sed 's/^data: //')
  echo "$(echo "$t1 - $t0" | bc -l | sed 's/^\./0./') $(jq -r '.usage.prompt_tokens_details.cached_tokens // 0' <<<"$usage") $(jq -r '.usage.prompt_tokens' <<<"$usage")"
}

run() { # name
  local url=http://127.0.0.1:$PORT
  if [ "$1" = cpulm ]; then
    "$CPULM" serve -m "$MODEL" --port $PORT -np "$NP" -c "$CTX" -t "$T" ${CPULM_ARGS:-} >"$OUT/$1.log" 2>&1 &
  else
    # the shared copy may hold its .so symlinks as small text files naming their targets
    # (a copy that lost the links): rebuild them in a private dir, searched first
    mkdir -p "$OUT/llama-lib"
    for f in "$LLAMA"/lib*.so*; do
      [ "$(stat -c %s "$f")" -lt 64 ] && ln -sf "$LLAMA/$(cat "$f")" "$OUT/llama-lib/$(basename "$f")"
    done
    LD_LIBRARY_PATH=$OUT/llama-lib "$LLAMA/llama-server" -m "$MODEL" --port $PORT -np "$NP" -c $((NP * CTX)) -t "$T" \
      --metrics ${LLAMA_ARGS:-} >"$OUT/$1.log" 2>&1 &
  fi
  PID=$!
  # cpulm's /health is liveness (200 while loading), /ready readiness; llama-server's
  # /health answers 503 until the model is loaded
  wait_ready "$url" "$([ "$1" = cpulm ] && echo /ready || echo /health)" || { echo "$1 did not start: $(tail -n 3 "$OUT/$1.log")"; return 1; }
  sleep 2
  "$CPULM" loadtest --url "$url" --concurrency "$C" --requests "$N" --prompt-len "$W" \
    --max-tokens "$M" --stream --timeout 1800 -o json >"$OUT/$1.load.json"
  jq -r --arg n "$1" '.levels[0] | "\($n) load: ok \(.ok) errors \(.errors), total \(((.mean_prompt_tokens + '"$M"') * .ok / .wall_s) * 100 | round / 100) t/s (output \(.output_tokens_per_s * 100 | round / 100)), gap p50/p99 \(.itl_ms.p50 | round)/\(.itl_ms.p99 | round) ms, TTFT p90 \(.ttft_ms.p90 | round) ms"' \
    "$OUT/$1.load.json" | tee -a "$OUT/summary.txt"
  if [ "$1" = cpulm ]; then # the scheduler's steps and its step model after the load
    curl -s "$url/metrics" | awk '/^cpulm_(steps_total|long_steps_total|step_[a-z]*_seconds) / { v[$1] = $2 }
      END { printf "cpulm steps: %d (long %d); target %.0f ms, model fixed %.1f gen %.1f prompt token %.1f ms\n",
      v["cpulm_steps_total"], v["cpulm_long_steps_total"], v["cpulm_step_target_seconds"] * 1e3,
      v["cpulm_step_fixed_seconds"] * 1e3, v["cpulm_step_gen_seconds"] * 1e3, v["cpulm_step_token_seconds"] * 1e3 }' |
      tee -a "$OUT/summary.txt"
  fi
  local long cold warm
  long=$(words "$LW" 1)
  cold=$(one "$url" "$long")
  for k in $(seq "$K"); do one "$url" "$(words "$LW" $((k + 100)))" >/dev/null; done
  warm=$(one "$url" "$long")
  echo "$1 prompt cache: cold [ttft s, cached, prompt] $cold; repeated after $K others: $warm" | tee -a "$OUT/summary.txt"
  kill "$PID"; wait "$PID" 2>/dev/null; PID=
}

: >"$OUT/summary.txt"
for s in $ORDER; do run "$s"; done
