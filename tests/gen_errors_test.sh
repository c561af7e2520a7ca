#!/usr/bin/env bash
# gen_errors_test.sh: `cpulm run` and `cpulm chat` report a failed decode or speculative step
# (a "generation failed" line, exit 1) instead of ending the output silently with exit 0,
# while a full KV cache stays a normal stop (exit 0; chat says "[context full"). The failures
# are injected by cpulm-faults (tests/fault_wrap.c: the command with cpulm_ctx_decode and
# cpulm_spec_step wrapped, CPULM_FAULT=FN:N:STATUS). Usage: gen_errors_test.sh path/to/cpulm-faults
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
STORIES=$SHARED/models/stories260K.gguf
if [ ! -f "$STORIES" ]; then echo "skip: $STORIES not found (set CPULM_SHARED)"; exit 77; fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() { if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1 ${3:-}"; fi; }
printf 'Once upon a time\nTell me more\n' >"$TMP/turns"

# expect NAME RC FAULT ARGS...: the command under CPULM_FAULT=FAULT exits RC, prints a
# "generation failed" line exactly when RC is 1, and printed some text before it stopped
expect() {
  local name=$1 want=$2 fault=$3
  shift 3
  CPULM_FAULT=$fault "$CPULM" "$@" <"$TMP/turns" >"$TMP/out" 2>"$TMP/err"
  local rc=$? said=0
  grep -q "generation failed: out of memory" "$TMP/err" && said=1
  [ "$rc" -eq "$want" ] && [ "$said" -eq "$want" ] && [ "$(wc -c <"$TMP/out")" -gt 3 ]
  check "$name" $? "rc=$rc $(tail -n 2 "$TMP/err")"
}
RUN=(run -m "$STORIES" -p "Once upon a time" -n 40 -t 1 --temp 0 --ignore-eos)
CHAT=(chat -m "$STORIES" -n 30 -t 1 --temp 0)
SPEC=(--spec ngram --spec-fixed --spec-ngram-min 1)
# -1: CPULM_ERR_NOMEM, -6: CPULM_ERR_KV_FULL; a call number past the end never fails
expect run_spec_ok 0 spec_step:9999:-1 "${RUN[@]}" "${SPEC[@]}"
expect run_spec_error 1 spec_step:3:-1 "${RUN[@]}" "${SPEC[@]}"
expect run_spec_kv_full 0 spec_step:3:-6 "${RUN[@]}" "${SPEC[@]}"
expect run_draft_error 1 spec_step:2:-1 "${RUN[@]}" -md "$STORIES" --draft-max 3
expect run_decode_error 1 decode:5:-1 "${RUN[@]}"
expect chat_spec_error 1 spec_step:5:-1 "${CHAT[@]}" "${SPEC[@]}"
expect chat_decode_error 1 decode:8:-1 "${CHAT[@]}"
expect chat_spec_kv_full 0 spec_step:3:-6 "${CHAT[@]}" "${SPEC[@]}"
grep -q "\[context full" "$TMP/out"
check chat_spec_kv_full_said $?
# the failed chat ends there: the second turn is never answered
CPULM_FAULT=decode:8:-1 "$CPULM" "${CHAT[@]}" <"$TMP/turns" >"$TMP/out" 2>/dev/null
[ "$(grep -c . "$TMP/out")" -le 1 ]
check chat_error_ends_the_chat $? "$(cat "$TMP/out")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
