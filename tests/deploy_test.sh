#!/usr/bin/env bash
# deploy_test.sh: scale-out with existing tools: two `cpulm serve` replicas behind a real nginx
# load balancer (deploy/nginx.conf), all on 127.0.0.1. Checks that requests through nginx are
# answered, spread over both replicas, keep streaming through the proxy, and survive one
# replica draining on SIGTERM. Usage: deploy_test.sh path/to/cpulm. Kills only its own PIDs.
set -u
CPULM=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${CPULM_SHARED:-$ROOT/../shared}
MODEL=$SHARED/models/stories260K.gguf
. "$(dirname "$0")/lib.sh"

need_tools nginx
need_file "$MODEL"

start_replica() { # name -> sets PORT and NAME_pid
  lib_serve "$1" "$MODEL" -np 2 -t 1 || return 1
  eval "$1_pid=$SPID"
}

start_replica r1; check replica1_ready $?; P1=$PORT
start_replica r2; check replica2_ready $?; P2=$PORT
LB=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$TMP/nginx"
sed -e "s/REPLICA1/$P1/" -e "s/REPLICA2/$P2/" -e "s/LBPORT/$LB/" "$ROOT/deploy/nginx.conf" >"$TMP/nginx/nginx.conf"
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -g 'daemon off;' 2>"$TMP/nginx.err" &
PIDS+=($!)
for _ in $(seq 50); do curl -fsS "http://127.0.0.1:$LB/health" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "http://127.0.0.1:$LB/health" >/dev/null; check lb_health $? "$(cat "$TMP/nginx.err")"

# 8 concurrent completions through the balancer: all answered, both replicas used
body='{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}'
for i in $(seq 8); do
  curl -fsS -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$LB/v1/completions" >"$TMP/c$i.json" &
done
wait_ok=0
for i in $(seq 8); do
  for _ in $(seq 100); do [ -s "$TMP/c$i.json" ] && break; sleep 0.1; done
  grep -q '"finish_reason"' "$TMP/c$i.json" || wait_ok=1
done
check lb_all_answered $wait_ok
text_of() { sed -n 's/.*"text":"\([^"]*\)".*/\1/p' "$1"; }
same=0
for i in $(seq 2 8); do [ "$(text_of "$TMP/c1.json")" = "$(text_of "$TMP/c$i.json")" ] || same=1; done
check lb_same_greedy_answer_on_both_replicas $same
served() { curl -fsS "http://127.0.0.1:$1/metrics" | awk '/^cpulm_requests_finished_total/ {s+=$2} END {print s+0}'; }
s1=$(served "$P1"); s2=$(served "$P2")
[ "${s1:-0}" -gt 0 ] && [ "${s2:-0}" -gt 0 ]; check lb_spread_over_replicas $? "replica1=$s1 replica2=$s2"

# streaming passes through the proxy unbuffered: several SSE events and [DONE]
curl -fsSN -H 'Content-Type: application/json' \
  -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "stream": true}' \
  "http://127.0.0.1:$LB/v1/completions" >"$TMP/sse.txt"
[ "$(grep -c '^data: ' "$TMP/sse.txt")" -ge 3 ] && grep -q '^data: \[DONE\]' "$TMP/sse.txt"
check lb_streaming $?

# a rolling update: replica 1 drains on SIGTERM and exits 0; traffic keeps flowing via replica 2
kill -TERM "$r1_pid"
ok=0
for i in $(seq 4); do
  curl -fsS -H 'Content-Type: application/json' -d "$body" "http://127.0.0.1:$LB/v1/completions" | grep -q '"finish_reason"' || ok=1
done
check lb_survives_replica_shutdown $ok
wait "$r1_pid"; check replica1_drained_exit_0 $?
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
