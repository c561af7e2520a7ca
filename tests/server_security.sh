#!/usr/bin/env bash
# server_security.sh: regression tests for issue #9 against `cpulm serve` on stories260K:
#   split:    the e2e suite's requests, each delivered split at random byte boundaries with
#             pauses (head and body in separate writes: the use-after-free of the parser
#             views); every answer must have the status (and, for greedy generations, the
#             text) of the same request sent in one piece;
#   flood:    1,100 idle connections from one client leave /health answering in < 1 s;
#   limits:   the per-client limit displaces the client's oldest idle connection; a
#             connection that sends no head is closed after --head-timeout;
#   grace:    at grace expiry the running stream gets an error event, [DONE] and the final
#             chunk, and queued requests a 503 before any stream header;
#   tokenize: /health answers quickly while a 10 MB prompt is being tokenized;
#   bodyflood: 1,280 connections from 5 addresses waiting for bodies that never come leave
#             /health answering and a new client served, with RSS bounded (tests/body_flood.py);
#             a stalled body gets 408 after --body-timeout; --max-body-total answers 503 with
#             Retry-After and displaces a stalled body for a new one;
#   apikey:   an empty --api-key or $CPULM_API_KEY is a usage error (exit 2), not "no auth".
# Usage: server_security.sh path/to/cpulm [section...]. Servers bind 127.0.0.1 on a free
# port; the script kills only the PIDs it started; every wait loop is bounded.
# SEED=N replays the same split points (printed at the start); ROUNDS="1 2 3" repeats the
# split pass with new random points (default one pass).
set -u
CPULM=$1
shift
SECTIONS=${*:-split flood limits grace tokenize bodyflood apikey}
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
. "$(dirname "$0")/lib.sh"
need_file "$MODEL"
need_tools curl jq timeout
SEED=${SEED:-$(( $(date +%s) % 100000 ))}
RANDOM=$SEED
echo "server_security: SEED=$SEED sections: $SECTIONS"
trap "" PIPE # a server closing a connection must not kill the script mid-write
want() { case " $SECTIONS " in *" $1 "*) return 0;; esac; return 1; }

# start_server NAME ARGS...: lib_serve on the model, and URL
start_server() {
  local name=$1; shift
  lib_serve "$name" "$MODEL" "$@" || return 1
  URL=http://127.0.0.1:$PORT
}
stop_server() { # SIGTERM and a bounded wait; returns the exit status
  kill -TERM "$SPID" 2>/dev/null
  for _ in $(seq 200); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$SPID" 2>/dev/null && kill -KILL "$SPID"
  wait "$SPID"
}
# send FILE [pieces]: sends the raw request in FILE over a new connection, split at random
# boundaries (one of them at the end of the head) with random pauses, and prints the answer.
exec {NAPFD}<> <(:) # never readable: `read -t S -u $NAPFD` is a sleep without a process
nap() { read -r -t "$1" -u "$NAPFD"; }
send_split() {
  local f=$1 pieces=${2:-3} size head cut prev=0 i
  size=$(stat -c %s "$f")
  [ -f "$f.head" ] || grep -abo $'\r$' "$f" | awk -F: 'prev + 2 == $1 { print $1 + 2; exit } { prev = $1 }' >"$f.head"
  head=$(<"$f.head")
  local cuts=()
  [ "$pieces" -gt 1 ] && [ -n "$head" ] && [ "$head" -lt "$size" ] && cuts+=("$head")
  for ((i = 1; i < pieces; i++)); do cuts+=($(( (RANDOM * 32768 + RANDOM) % size + 1 ))); done
  exec 3<>/dev/tcp/127.0.0.1/"$PORT" || return 1
  for cut in $(printf '%s\n' "${cuts[@]}" | sort -n -u) "$size"; do
    [ "$cut" -le "$prev" ] && continue
    dd if="$f" iflag=skip_bytes,count_bytes skip=$prev count=$((cut - prev)) status=none >&3 2>/dev/null
    prev=$cut
    [ "$cut" -lt "$size" ] && nap "0.$((RANDOM % 2))$((RANDOM % 10 + 1))"
  done
  timeout 20 cat <&3
  exec 3<&-
}
KEY=sk-test-123

# ---- split delivery of the e2e requests ----
if want split; then
  start_server split -np 4 -c 2100 --chunk 128 -t 1 --api-key $KEY --max-body 65536
  check split_ready $?
  n=0
  req() { # status, method, path, body ("" for none), extra header lines
    n=$((n + 1))
    local st=$1 method=$2 path=$3 body=$4 extra=${5:-}
    {
      printf '%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n' "$method" "$path"
      [ -n "$extra" ] && printf '%s' "$extra"
      [ -n "$body" ] && printf 'Content-Type: application/json\r\nContent-Length: %d\r\n' "${#body}"
      printf '\r\n%s' "$body"
    } >"$TMP/req$n"
    echo "$st" >"$TMP/want$n"
  }
  A="Authorization: Bearer $KEY"$'\r\n'
  long=$(printf 'Once upon a time there was a dog. %.0s' $(seq 300))
  big15=$(printf 'Once upon a time there was a dog named Max. %.0s' $(seq 341))
  req 200 GET /health ""
  req 200 GET /v1/models "" "$A"
  req 200 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0}' "$A"
  req 200 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":24,"temperature":0,"stream":true}' "$A"
  req 200 POST /v1/chat/completions '{"messages":[{"role":"system","content":"Tell a story."},{"role":"user","content":"A dog"}],"max_tokens":16,"temperature":0,"n":3}' "$A"
  req 400 POST /v1/completions '{"prompt":' "$A"
  req 401 POST /v1/completions '{"prompt":"x"}'
  req 404 GET /v1/nothing "" "$A"
  req 405 GET /v1/completions "" "$A"
  req 400 POST /v1/completions "{\"prompt\":\"$long\",\"max_tokens\":2}" "$A"
  req 400 POST /v1/completions "{\"prompt\":\"$big15\",\"max_tokens\":2}" "$A"
  req 400 POST /v1/completions "{\"prompt\":\"$big15\",\"max_tokens\":2}" "${A}Expect: 100-continue"$'\r\n'
  req 200 POST /v1/completions "{\"prompt\":\"${long:0:1200}\",\"max_tokens\":2,\"temperature\":0}" "$A"
  printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nf\r\n{"prompt":"Once\r\n16;ext=1\r\n upon","max_tokens":2}\r\n0\r\n\r\n' $KEY >"$TMP/req$((n + 1))"
  n=$((n + 1)); echo 200 >"$TMP/want$n"
  head -c 70000 /dev/zero | tr '\0' 'a' >"$TMP/bigbody"
  { printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Length: 70000\r\nConnection: close\r\n\r\n' "$A"; cat "$TMP/bigbody"; } >"$TMP/req$((n + 1))"
  n=$((n + 1)); echo 413 >"$TMP/want$n"
  for i in $(seq $n); do # the reference: each request in one piece
    send_split "$TMP/req$i" 1 >"$TMP/ref$i"
  done
  for round in ${ROUNDS:-1}; do
    for i in $(seq $n); do
      send_split "$TMP/req$i" 4 >"$TMP/got$i"
      st=$(head -n 1 "$TMP/got$i" | grep -v '^HTTP/1.1 100' | tr -d '\r' | cut -d' ' -f2)
      [ -z "$st" ] && st=$(grep -a '^HTTP/1.1 [0-9]' "$TMP/got$i" | grep -v ' 100 ' | head -n 1 | cut -d' ' -f2)
      [ "$st" = "$(cat "$TMP/want$i")" ]
      check "split_r${round}_req${i}_status" $? "(got '$st', want $(cat "$TMP/want$i"); $(head -c 200 "$TMP/got$i" | tr '\r\n' '  '))"
      # greedy generations: the same text as the request sent whole
      if grep -q '"temperature":0' "$TMP/req$i" && ! grep -q '"stream":true' "$TMP/req$i" && [ "$st" = 200 ]; then
        a=$(sed -n '/^\r$/,$p' "$TMP/ref$i" | jq -c '[.choices[] | (.text // .message.content)]' 2>/dev/null)
        b=$(sed -n '/^\r$/,$p' "$TMP/got$i" | jq -c '[.choices[] | (.text // .message.content)]' 2>/dev/null)
        [ -n "$a" ] && [ "$a" = "$b" ]; check "split_r${round}_req${i}_same_text" $? "($a vs $b)"
      fi
    done
  done
  [ "$(curl -s "$URL/health")" = '{"status":"ok"}' ]; check split_server_alive $?
  stop_server; check split_exit_0 $?
fi

# ---- a one-client flood of 1,100 idle connections ----
if want flood; then
  need=2400
  if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $need ]; then
    ulimit -n $need 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  fi
  if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 1200 ]; then
    echo "skip flood: cannot raise the descriptor limit to 1200 ($(ulimit -n))"; skipped=1
  else
    start_server flood -np 1 -t 1
    check flood_ready $?
    FDS=()
    for _ in $(seq 1100); do
      exec {fd}<>/dev/tcp/127.0.0.1/"$PORT" 2>/dev/null || break
      FDS+=("$fd")
    done
    [ ${#FDS[@]} -eq 1100 ]; check flood_opened_1100 $? "(${#FDS[@]})"
    worst=0
    for k in 1 2 3; do
      tt=$(curl -s -m 5 -o "$TMP/fh" -w '%{http_code} %{time_total}' "$URL/health")
      awk -v c="${tt% *}" -v t="${tt#* }" 'BEGIN { exit !(c == 200 && t < 1.0) }' || { worst=1; echo "  /health under flood: $tt"; }
    done
    check flood_health_under_1s $worst
    for fd in "${FDS[@]}"; do exec {fd}>&-; done
    [ "$(curl -s -m 5 "$URL/health")" = '{"status":"ok"}' ]; check flood_alive_after $?
    stop_server; check flood_exit_0 $?
  fi
fi

# ---- per-client limit and head timeout ----
if want limits; then
  start_server limits -np 1 -t 1 --max-conns-per-client 8 --head-timeout 1
  check limits_ready $?
  FDS=()
  for _ in $(seq 8); do exec {fd}<>/dev/tcp/127.0.0.1/"$PORT"; FDS+=("$fd"); sleep 0.02; done
  tt=$(curl -s -m 5 -o /dev/null -w '%{http_code} %{time_total}' "$URL/health")
  awk -v c="${tt% *}" -v t="${tt#* }" 'BEGIN { exit !(c == 200 && t < 1.0) }'
  check limits_ninth_connection_served $? "($tt)"
  # the oldest idle connection made room: the server closed it (EOF at once)
  timeout 0.5 cat <&"${FDS[0]}" >/dev/null; check limits_oldest_idle_evicted $?
  for fd in "${FDS[@]}"; do exec {fd}>&-; done
  # a connection that sends nothing is closed after the head timeout (1 s), not 60 s
  exec {fd}<>/dev/tcp/127.0.0.1/"$PORT"
  t0=$EPOCHREALTIME
  timeout 5 cat <&"$fd" >/dev/null; rc=$?
  t1=$EPOCHREALTIME
  exec {fd}>&-
  awk -v r=$rc -v a="$t0" -v b="$t1" 'BEGIN { exit !(r == 0 && b - a < 3) }'
  check limits_head_timeout $? "(rc $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s)"
  # a slow head (one byte per 0.3 s) is cut after the head timeout as well
  exec {fd}<>/dev/tcp/127.0.0.1/"$PORT"
  for ch in G E T ' ' / h e a l t h; do printf '%s' "$ch" >&"$fd" 2>/dev/null || break; sleep 0.3; done
  timeout 3 cat <&"$fd" >"$TMP/slow"; rc=$?
  exec {fd}>&-
  ! grep -q 'HTTP/1.1 200' "$TMP/slow" && [ $rc -ne 124 ]; check limits_slow_head_cut $? "(rc $rc)"
  stop_server; check limits_exit_0 $?
fi

# ---- grace expiry: every stream ends cleanly, queued requests get 503 ----
if want grace; then
  start_server grace -np 1 --max-queue 4 -c 4096 -t 1 --grace 0.5
  check grace_ready $?
  gen() { # i stream: curl with headers to $TMP/gh$i, body to $TMP/gb$i, rc to $TMP/grc$i
    local body
    body="{\"prompt\":\"Once upon a time\",\"max_tokens\":4000,\"ignore_eos\":true,\"temperature\":0,\"stream\":$2}"
    timeout 30 curl -sN -D "$TMP/gh$1" -o "$TMP/gb$1" "$URL/v1/completions" -d "$body"
    echo $? >"$TMP/grc$1"
  }
  gen 0 true &
  for _ in $(seq 200); do [ -s "$TMP/gb0" ] && break; sleep 0.02; done
  gen 1 true & gen 2 true & gen 3 false &
  for _ in $(seq 200); do
    [ "$(curl -s "$URL/metrics" | sed -n 's/^cpulm_requests_waiting \([0-9]*\).*/\1/p')" = 3 ] && break; sleep 0.02
  done
  stop_server; check grace_exit_0 $?
  for _ in $(seq 200); do [ -s "$TMP/grc1" ] && [ -s "$TMP/grc2" ] && [ -s "$TMP/grc3" ] && [ -s "$TMP/grc0" ] && break; sleep 0.05; done
  n503=0; nerr=0
  for i in 0 1 2 3; do
    code=$(head -n 1 "$TMP/gh$i" 2>/dev/null | cut -d' ' -f2)
    rc=$(cat "$TMP/grc$i" 2>/dev/null)
    if [ "$code" = 503 ]; then
      n503=$((n503 + 1))
      jq -e '.error.message | test("shutting down")' "$TMP/gb$i" >/dev/null; check "grace_client${i}_503_json" $?
      [ "$(grep -c '^HTTP/' "$TMP/gh$i")" -eq 1 ]; check "grace_client${i}_no_stream_header" $?
    elif [ "$i" != 3 ]; then
      # a stream that was running: clean end (curl rc 0: the final chunk came), [DONE] last
      [ "$code" = 200 ] && [ "$rc" = 0 ] && [ "$(grep -v '^$' "$TMP/gb$i" | tail -n 1)" = "data: [DONE]" ]
      check "grace_stream${i}_ends_cleanly" $? "(status $code, curl rc $rc, last: $(tail -c 120 "$TMP/gb$i"))"
      grep -q '^data: {"error"' "$TMP/gb$i" && nerr=$((nerr + 1))
    else
      [ "$code" = 200 ] && [ "$rc" = 0 ]; check grace_plain_request_answered $? "(status $code, rc $rc)"
    fi
  done
  [ $n503 -ge 1 ] && [ $nerr -ge 1 ]; check grace_expiry_exercised $? "(503s: $n503, error events: $nerr)"
fi

# ---- a 10 MB prompt is tokenized off the I/O thread ----
if want tokenize; then
  start_server tok -np 1 -t 1 --max-body 16777216
  check tok_ready $?
  { printf '{"max_tokens":1,"prompt":"'; yes 'Once upon a time, there was a big dog.' | head -c 10000000 | tr '\n' ' '; printf '"}'; } >"$TMP/huge.json"
  curl -s -o "$TMP/huge.out" -w '%{http_code}' "$URL/v1/completions" --data-binary @"$TMP/huge.json" >"$TMP/huge.code" &
  HUGE=$!
  sleep 0.4 # upload and JSON parse are done; the tokenization is under way
  slow=0
  during=0
  for k in 1 2 3 4 5; do
    kill -0 $HUGE 2>/dev/null && during=$((during + 1))
    tt=$(curl -s -m 10 -o /dev/null -w '%{http_code} %{time_total}' "$URL/health")
    [ -n "${VERBOSE:-}" ] && echo "  /health during tokenization: $tt"
    awk -v c="${tt% *}" -v t="${tt#* }" 'BEGIN { exit !(c == 200 && t < 0.5) }' || { slow=1; echo "  /health during tokenization: $tt"; }
    sleep 0.1
  done
  check tok_health_fast $slow
  wait $HUGE
  [ "$(cat "$TMP/huge.code")" = 400 ] && jq -e '.error.code == "context_length_exceeded"' "$TMP/huge.out" >/dev/null
  check tok_huge_prompt_400 $? "($(cat "$TMP/huge.code") $(head -c 200 "$TMP/huge.out"))"
  [ $during -ge 1 ]; check tok_probes_overlapped_tokenization $? "($during probes while it ran)"
  stop_server; check tok_exit_0 $?
fi

# ---- connections waiting for their bodies (issue #25 row 1) ----
if want bodyflood; then
  if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 3000 ]; then
    ulimit -n 3000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  fi
  if ! command -v python3 >/dev/null; then
    echo "skip bodyflood: python3 is not installed"; skipped=1
  elif [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 3000 ]; then
    echo "skip bodyflood: cannot raise the descriptor limit to 3000 ($(ulimit -n))"; skipped=1
  else
    FLOOD=$(dirname "$0")/body_flood.py
    # under ASan, freed memory waits in a 256 MB quarantine and would count as RSS growth
    ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16 start_server bodyflood -np 1 -t 1
    check bodyflood_ready $?
    # 1,280 connections from 127.0.0.1..5, each a head with a 1 MB Content-Length and 200 KB
    # of it; then only heads (a 1,000-byte body that never comes): /health keeps answering,
    # a new client's completion succeeds, RSS stays bounded
    python3 "$FLOOD" "$PORT" "$SPID" 256 5 128 1000000 200000; check bodyflood_partial_bodies $?
    python3 "$FLOOD" "$PORT" "$SPID" 256 5 128 1000 0; check bodyflood_heads_only $?
    [ "$(curl -s -m 5 "$URL/health")" = '{"status":"ok"}' ]; check bodyflood_alive_after $?
    stop_server; check bodyflood_exit_0 $?
  fi
  start_server bodylimits -np 1 -t 1 --body-timeout 1 --max-body 262144 --max-body-total 400000
  rc=$?
  check bodylimits_ready $rc
fi
if want bodyflood && [ $rc -eq 0 ]; then
  # a body that stops arriving gets 408 after --body-timeout (not 30 s later)
  exec {fd}<>/dev/tcp/127.0.0.1/"$PORT"
  printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"pro' >&"$fd"
  t0=$EPOCHREALTIME
  timeout 5 cat <&"$fd" >"$TMP/bt"; rc=$?
  t1=$EPOCHREALTIME
  exec {fd}>&-
  head -n 1 "$TMP/bt" | grep -q '^HTTP/1.1 408' && awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 3) }'
  check bodylimits_body_timeout_408 $? "(rc $rc, $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s: $(head -c 100 "$TMP/bt"))"
  # the budget (400,000 bytes) holds one 250,000-byte body: a second gets 503 + Retry-After
  # at once; once the first has stalled for a second, it is displaced for the next one
  exec {f1}<>/dev/tcp/127.0.0.1/"$PORT"
  printf 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 250000\r\n\r\n{"prompt":"' >&"$f1"
  head -c 249985 /dev/zero | tr '\0' 'a' >"$TMP/b250"
  printf '","max_tokens":1}' >>"$TMP/b250"
  nap 0.2
  curl -s -m 5 -D "$TMP/bh" -o /dev/null -H 'Content-Type: application/json' --data-binary @"$TMP/b250" "$URL/v1/completions"
  head -n 1 "$TMP/bh" | grep -q ' 503' && grep -qi '^Retry-After: 1' "$TMP/bh"
  check bodylimits_budget_503_retry_after $? "($(head -n 1 "$TMP/bh"))"
  nap 1.2
  code=$(curl -s -m 10 -o "$TMP/bb" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$TMP/b250" "$URL/v1/completions")
  [ "$code" != 503 ] && [ "$code" != 000 ]; check bodylimits_stalled_body_displaced $? "($code)"
  timeout 2 cat <&"$f1" >/dev/null; check bodylimits_stalled_connection_closed $?
  exec {f1}>&-
  [ "$(curl -s -m 5 "$URL/health")" = '{"status":"ok"}' ]; check bodylimits_alive_after $?
  stop_server; check bodylimits_exit_0 $?
fi

# ---- an empty API key is a usage error, never "no authentication" (issue #25) ----
if want apikey; then
  timeout 5 "$CPULM" serve -m "$MODEL" --port 0 --api-key '' >"$TMP/ak1.out" 2>"$TMP/ak1.err"; rc=$?
  [ $rc -eq 2 ] && grep -q -- "--api-key is empty" "$TMP/ak1.err"
  check apikey_empty_flag_exit_2 $? "(rc $rc: $(head -c 200 "$TMP/ak1.err"))"
  CPULM_API_KEY= timeout 5 "$CPULM" serve -m "$MODEL" --port 0 >"$TMP/ak2.out" 2>"$TMP/ak2.err"; rc=$?
  [ $rc -eq 2 ] && grep -q 'CPULM_API_KEY is empty' "$TMP/ak2.err"
  check apikey_empty_env_exit_2 $? "(rc $rc: $(head -c 200 "$TMP/ak2.err"))"
  timeout 5 "$CPULM" serve -m "$MODEL" --port 0 --api-key $'sk-a\tb' >/dev/null 2>"$TMP/ak3.err"; rc=$?
  [ $rc -eq 2 ]; check apikey_control_char_exit_2 $? "(rc $rc)"
  # a key given on the command line overrides an empty $CPULM_API_KEY, and is enforced
  CPULM_API_KEY= start_server apikey -np 1 -t 1 --api-key $KEY
  check apikey_flag_over_empty_env_ready $?
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/models")" = 401 ]; check apikey_enforced_401 $?
  [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $KEY" "$URL/v1/models")" = 200 ]
  check apikey_accepted_200 $?
  stop_server; check apikey_exit_0 $?
fi

echo "server_security: $pass passed, $fail failed${skipped:+, some parts skipped}"
[ $fail -eq 0 ] || exit 1
[ -z "${skipped:-}" ] || exit 77 # ctest lists the test as skipped
