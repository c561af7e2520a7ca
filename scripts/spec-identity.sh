#!/usr/bin/env bash
# spec-identity.sh: issue #32's exactness bar, as an audit (minutes of CPU, not a CI test):
# greedy output with speculation equals greedy output without it for N prompts (default 50:
# the first sentences of the TinyStories text in testdata) on each reference model, in
# `cpulm run` and in `cpulm serve` with 8 concurrent users. Drafters: --spec ngram on every
# model, and -md with the model's own Q4_0 file where testdata has one (stories260K drafts
# for itself). Prints one line per model and mode with the count of identical outputs;
# exits 1 if any differs.
# Usage: scripts/spec-identity.sh path/to/cpulm [N]. Needs CPULM_SHARED (or ../shared),
# curl and jq. Servers bind 127.0.0.1 on a free port; only the PIDs started here are killed.
set -u
CPULM=$1
N=${2:-50}
SHARED=${CPULM_SHARED:-../shared}
TD=$SHARED/testdata/models
. "$(dirname "$0")/../tests/lib.sh" # TMP, PIDS killed at exit, need_tools, lib_serve
need_tools curl jq
# prompts: the first N sentences of 4 to 12 words
tr '\n' ' ' <"$SHARED/testdata/text/tinystories_valid_head.txt" | sed 's/\([.!?]\) /\1\n/g' |
  sed 's/^ *//' | awk 'NF >= 4 && NF <= 12' | head -n "$N" >"$TMP/prompts"
[ "$(wc -l <"$TMP/prompts")" -eq "$N" ] || { echo "only $(wc -l <"$TMP/prompts") prompts"; exit 2; }
bad=0

# model path, draft path ("" when none)
MODELS=("$SHARED/models/stories260K.gguf|$SHARED/models/stories260K.gguf")
for m in llama qwen2 qwen3 mixtral llama3; do
  [ -f "$TD/tiny-$m-q8_0.gguf" ] && MODELS+=("$TD/tiny-$m-q8_0.gguf|$TD/tiny-$m-q4_0.gguf")
done

run_all() { # model out_prefix flags...: greedy continuations of every prompt
  local m=$1 out=$2 i=0; shift 2
  while IFS= read -r p; do
    i=$((i + 1))
    "$CPULM" run -m "$m" -p "$p" -n 32 --temp 0 -t 1 --ignore-eos "$@" >"$out.$i" 2>/dev/null
  done <"$TMP/prompts"
}
compare() { # label a_prefix b_prefix
  local same=0 i
  for i in $(seq "$N"); do cmp -s "$1.$i" "$2.$i" && [ -s "$1.$i" ] && same=$((same + 1)); done
  echo "$3: $same of $N identical"
  [ "$same" -eq "$N" ] || bad=1
}
serve_all() { # model out_prefix flags...: the prompts from 8 concurrent users (each file as
  # `cpulm run` prints it: the prompt, then the text)
  local m=$1 out=$2; shift 2
  lib_serve srv "$m" -np 8 -c 512 -t 1 "$@" || { bad=1; return; }
  awk '{ printf "%d\t%s\n", NR, $0 }' "$TMP/prompts" |
    xargs -P 8 -d '\n' -I{} bash -c 'i=${1%%$'"'"'\t'"'"'*}; p=${1#*$'"'"'\t'"'"'}
      { printf "%s" "$p"; jq -n --arg p "$p" "{prompt: \$p, max_tokens: 32, temperature: 0, ignore_eos: true}" |
        curl -s -m 120 "http://127.0.0.1:$2/v1/completions" -d @- | jq -r ".choices[0].text"; } >"$3.$i"' _ {} "$PORT" "$out"
  kill -TERM "$SPID"
  wait "$SPID" 2>/dev/null
}

for md in "${MODELS[@]}"; do
  m=${md%%|*} d=${md#*|}
  name=$(basename "$m" .gguf)
  run_all "$m" "$TMP/run.plain"
  run_all "$m" "$TMP/run.ngram" --spec ngram
  compare "$TMP/run.plain" "$TMP/run.ngram" "$name run --spec ngram"
  if [ -f "$d" ]; then
    run_all "$m" "$TMP/run.draft" -md "$d"
    compare "$TMP/run.plain" "$TMP/run.draft" "$name run -md $(basename "$d")"
  fi
  serve_all "$m" "$TMP/srv.plain"
  compare "$TMP/run.plain" "$TMP/srv.plain" "$name serve (8 users, plain) vs run"
  serve_all "$m" "$TMP/srv.ngram" --spec ngram
  compare "$TMP/srv.plain" "$TMP/srv.ngram" "$name serve --spec ngram (8 users)"
  if [ -f "$d" ]; then
    serve_all "$m" "$TMP/srv.draft" -md "$d"
    compare "$TMP/srv.plain" "$TMP/srv.draft" "$name serve -md $(basename "$d") (8 users)"
  fi
done
exit $bad
