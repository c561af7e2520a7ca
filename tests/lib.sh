# lib.sh: what the shell tests that start `cpulm serve` share; sourced (`. "$(dirname "$0")/lib.sh"`)
# after setting CPULM. It gives:
#   TMP            a temporary folder, removed at exit
#   PIDS           the processes the test started (lib_serve adds each server): killed at exit,
#                  and only these
#   check NAME RC [DETAIL]   counts a check (RC 0: passed) in pass / fail; prints failures
#   need_tools TOOL...       exits 77 (ctest: skipped) naming the first tool not installed
#   need_file FILE           exits 77 when FILE (a shared model) is missing
#   lib_serve NAME MODEL ARGS...  starts `cpulm serve -m MODEL --port 0 ARGS` in the
#                  background (output in $TMP/NAME.out and .err), sets SPID and PORT, and
#                  waits, bounded (5 s for the port, 10 s for /ready), until it is ready;
#                  returns 1 with the server's stderr printed when it is not.
# Servers bind 127.0.0.1 (cpulm serve's default host).

. "$(dirname "${BASH_SOURCE[0]}")/../scripts/serve_port.sh"
TMP=$(mktemp -d)
PIDS=()
lib_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$TMP"
}
trap lib_cleanup EXIT

pass=0
fail=0
check() { # name, condition result (0 = ok), detail
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1 ${3:-}"; fi
}

need_tools() {
  local tool
  for tool in "$@"; do
    if ! command -v "$tool" >/dev/null; then echo "skip: $tool is not installed"; exit 77; fi
  done
}

need_file() {
  if [ ! -f "$1" ]; then echo "skip: $1 not found (set CPULM_SHARED)"; exit 77; fi
}

lib_serve() {
  local name=$1 model=$2
  shift 2
  "$CPULM" serve -m "$model" --port 0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SPID=$!
  PIDS+=("$SPID")
  PORT=$(serve_port "$TMP/$name.out" "$SPID" 100)
  for _ in $(seq 200); do
    [ -n "$PORT" ] &&
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/ready")" = 200 ] &&
      return 0
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.05
  done
  echo "server $name did not become ready: $(cat "$TMP/$name.err")"
  return 1
}
