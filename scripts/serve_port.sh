# serve_port.sh: the one "wait for cpulm serve's port" loop of the scripts and shell tests;
# sourced. `cpulm serve --port 0` binds a port the system picks and prints
# "cpulm serve: listening on http://127.0.0.1:PORT" on stdout.
#   serve_port OUT PID [TRIES]   prints PORT once the line is in OUT (the server's stdout);
#                                polls every 0.05 s at most TRIES times (default 200: 10 s),
#                                gives up early when PID has exited; returns 1 without a port.
serve_port() {
  local out=$1 pid=$2 tries=${3:-200} port
  for _ in $(seq "$tries"); do
    port=$(sed -n 's/^cpulm serve: listening on http:\/\/127\.0\.0\.1:\([0-9]*\)$/\1/p' "$out" 2>/dev/null)
    [ -n "$port" ] && { echo "$port"; return 0; }
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  return 1
}
