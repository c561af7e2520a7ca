#!/usr/bin/env bash
# capacity_test.sh: `cpulm loadtest` end to end against `cpulm serve` on stories260K, small
# and bounded (a few seconds): a workload file, closed- and open-loop levels, the SLO search
# (one that finds a load, one that cannot), failures counted and refused (429s from a
# one-slot server with a one-request queue), cost from a price, and usage errors.
# Usage: capacity_test.sh path/to/cpulm
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/models/stories260K.gguf
. "$(dirname "$0")/lib.sh"
need_file "$MODEL"
need_tools jq curl

start_server() { # name, args...: a server on its own port, ready; the port goes to $TMP/NAME.port
  local name=$1
  shift
  lib_serve "$name" "$MODEL" -c 512 -t 1 "$@" && echo "$PORT" >"$TMP/$name.port"
}
port_of() { cat "$TMP/$1.port" 2>/dev/null; }
start_server main
MAIN_PID=$SPID
start_server busy -np 1 --max-queue 1
PORT=$(port_of main)
BUSY=$(port_of busy)
[ -n "$PORT" ] && [ -n "$BUSY" ]; check servers_started $?
URL=http://127.0.0.1:$PORT

cat >"$TMP/small.json" <<'EOF'
{"name": "small", "prompt_tokens": {"dist": "uniform", "min": 20, "max": 40},
 "output_tokens": {"dist": "normal", "mean": 12, "stddev": 3, "min": 4, "max": 20},
 "shared_prefix_tokens": 10, "arrival": {"process": "constant"}}
EOF

# closed loop from a workload: every request ok, the server's token counts, all metrics
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 1,3 --requests 6 \
  -o json >"$TMP/c.json" 2>"$TMP/c.err"
check closed_rc $? "$(cat "$TMP/c.err")"
jq -e '.workload == "small" and (.levels | length) == 2 and all(.levels[]; .ok == 6 and .errors == 0
       and .ttft_ms.p99 >= .ttft_ms.p50 and .itl_ms.p50 >= 0 and .tpot_ms.p50 > 0
       and .latency_ms.p99 >= .ttft_ms.p99 and .mean_prompt_tokens >= 20
       and .mean_output_tokens >= 4 and .mean_output_tokens <= 20 and .input_tokens_per_s > 0
       and .goodput_requests_per_s == .requests_per_s)' "$TMP/c.json" >/dev/null
check closed_report $? "$(head -c 600 "$TMP/c.json")"

# prompts sized in the server's tokens: stories260K's 512-token vocabulary splits the prompt
# words (~1.8 tokens each); calibrated by POST /tokenize of every word, the server's own
# usage counts are what the workload asked for (BOS included); a probe's ratio comes close;
# counted as one word one token (--calibrate off, as before) they overshoot
# (jq 1.6 -e exits 0 on an empty file: each check also needs the file non-empty)
tokens_ok() { # file, relative tolerance: every level's mean prompt tokens near the asked mean
  [ -s "$1" ] && jq -e --argjson tol "$2" 'all(.levels[]; .target_prompt_tokens as $t | .ok > 0
    and .mean_output_tokens == .target_output_tokens
    and (.mean_prompt_tokens - $t) <= $tol * $t and (.mean_prompt_tokens - $t) >= -$tol * $t - 1)' \
    "$1" >/dev/null
}
for mode in auto probe off; do
  "$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 2 --requests 6 \
    --calibrate $mode -o json >"$TMP/tok-$mode.json" 2>"$TMP/tok-$mode.err"
  check "tokens_${mode}_rc" $? "$(cat "$TMP/tok-$mode.err")"
done
[ -s "$TMP/tok-auto.json" ] && jq -e '.calibration.method == "tokenize" and .calibration.tokens_per_word > 1.3
       and .calibration.added_tokens == 1 and .calibration.why == null' "$TMP/tok-auto.json" >/dev/null
check tokens_calibrated $? "$(jq -c .calibration "$TMP/tok-auto.json")"
tokens_ok "$TMP/tok-auto.json" 0; check tokens_exact $? "$(jq -c '[.levels[] | [.mean_prompt_tokens, .target_prompt_tokens]]' "$TMP/tok-auto.json")"
[ -s "$TMP/tok-probe.json" ] && jq -e '.calibration.method == "probe"' "$TMP/tok-probe.json" >/dev/null && tokens_ok "$TMP/tok-probe.json" 0.1
check tokens_probe $? "$(jq -c '[.calibration, [.levels[] | [.mean_prompt_tokens, .target_prompt_tokens]]]' "$TMP/tok-probe.json")"
[ -s "$TMP/tok-off.json" ] && jq -e '.calibration.method == "off" and all(.levels[]; .mean_prompt_tokens > 1.3 * .target_prompt_tokens)' \
  "$TMP/tok-off.json" >/dev/null
check tokens_uncalibrated_overshoot $? "$(jq -c '[.levels[] | [.mean_prompt_tokens, .target_prompt_tokens]]' "$TMP/tok-off.json")"
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 1 --requests 2 >"$TMP/tok.md" 2>/dev/null
grep -q "^prompts sized in the server's tokens (POST /tokenize of every word: " "$TMP/tok.md" &&
  grep -Eq '^\|    1 \|.* \| ([0-9]+)/[0-9]+ \(\1/[0-9]+\) \|$' "$TMP/tok.md"
check tokens_column $? "$(cat "$TMP/tok.md")"

# open loop: constant arrivals at 20 req/s (the workload's process), 8 requests: ~0.35 s
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --rate 20 --requests 8 -o json \
  >"$TMP/r.json" 2>"$TMP/r.err"
check open_rc $? "$(cat "$TMP/r.err")"
jq -e '.levels[0].rate == 20 and .levels[0].arrivals == "constant" and .levels[0].ok == 8
       and .levels[0].wall_s >= 0.34' "$TMP/r.json" >/dev/null
check open_report $? "$(head -c 400 "$TMP/r.json")"

# the machine around each level (Linux): steal share and CPU use, the server's with --server-pid
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --rate 20 --requests 20 -o json \
  --server-pid "$MAIN_PID" >"$TMP/h.json" 2>"$TMP/h.err"
check host_rc $? "$(cat "$TMP/h.err")"
jq -e '.disturbance.sampled and .disturbance.server_pid == '"$MAIN_PID"'
       and .disturbance.steal_max == 0.05 and .disturbance.retries == 2
       and (.levels[0].host.steal_share | . >= 0 and . <= 1)
       and .levels[0].host.server_cpus > 0 and .levels[0].host.loadtest_cpus >= 0
       and .levels[0].host.wall_s >= .levels[0].wall_s and .levels[0].counted' \
  "$TMP/h.json" >/dev/null
check host_sampled $? "$(jq -c '.disturbance, .levels[0].host' "$TMP/h.json" 2>&1 | head -c 400)"

# warm-up requests reach the server but are not counted
finished() { curl -s "$URL/metrics" | awk '/^cpulm_requests_finished_total/ { n += $2 } END { print n + 0 }'; }
before=$(finished)
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 1 --requests 3 --warmup 2 \
  -o json >"$TMP/w.json" 2>/dev/null
after=$(finished)
jq -e '.levels[0].ok == 3' "$TMP/w.json" >/dev/null && [ $((after - before)) -eq 5 ]
check warmup_not_counted $? "finished $before -> $after"

# a workload with an arrival rate runs open loop at it when no load is given
sed 's/"process": "constant"}/"process": "constant", "rate": 25}/' "$TMP/small.json" >"$TMP/rated.json"
"$CPULM" loadtest --url "$URL" --workload "$TMP/rated.json" --requests 5 -o json >"$TMP/wr.json" 2>/dev/null
check workload_rate_rc $?
jq -e '(.levels | length) == 1 and .levels[0].rate == 25 and .levels[0].arrivals == "constant"' \
  "$TMP/wr.json" >/dev/null
check workload_rate_used $? "$(head -c 300 "$TMP/wr.json")"

# SLO search over concurrency with a generous objective: a best load, instances, cost
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --slo ttft_p99=30s,itl_p99=10s \
  --search-max 4 --requests 4 --users 10 --price-hour 3.6 >"$TMP/slo.md" 2>"$TMP/slo.err"
check slo_rc $? "$(cat "$TMP/slo.err")"
grep -q '^highest concurrency meeting it: \*\*4 users\*\*' "$TMP/slo.md"; check slo_best $?
# the answer (the search's maximum, met in the bracket) is confirmed by a majority of 3 trials
grep -q "^bracket: 4 (the search's maximum) met in 2 of 2 trials" "$TMP/slo.md"
check slo_confirmed $? "$(grep -A3 objective "$TMP/slo.md")"
grep -q '^instances needed for 10 concurrent users: 3 (4 users each)$' "$TMP/slo.md"
check slo_instances $?
grep -q '^cost on the given machine at 3.6000 USD/hour' "$TMP/slo.md"; check slo_cost $?
grep -q '| \$/1M input | \$/1M output |' "$TMP/slo.md"; check slo_cost_columns $?
# an objective nothing can meet (1 us: stories260K's first token takes ~1 ms on a quiet fast
# machine, so 1 ms was met there once): exit 1, said so
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --slo ttft_p50=0.001ms,itl_p99=0.001ms \
  --search-max 2 --search-steps 0 --requests 3 -o json >"$TMP/none.json" 2>/dev/null
rc=$?
[ $rc -eq 1 ] && jq -e '.slo.best == null and all(.levels[]; .slo_met == false)' \
  "$TMP/none.json" >/dev/null
check slo_unmet_exit1 $? "rc $rc"

# the search repeated (--repeat 2) over rates, timed trials whose first 0.2 s are not
# counted: both answers (the search's maximum), how far apart they are, the uncertainty
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --rate 4 --slo ttft_p99=30s,itl_p99=10s \
  --search-max 8 --requests 4 --trial-time 1 --trial-warmup 0.2 --trials 1 --repeat 2 >"$TMP/rep.md" 2>"$TMP/rep.err"
check repeat_rc $? "$(cat "$TMP/rep.err")"
grep -q '^repeats: search 1 8 (bracket 8-8), search 2 8 (bracket 8-8): 0.0% apart .*they agree$' "$TMP/rep.md"
check repeat_agree $? "$(tail -12 "$TMP/rep.md")"
grep -q '^uncertainty: 1 met trials at the answer; TTFT p99 .* 95% CI .* arrivals realised' "$TMP/rep.md"
check repeat_uncertainty $?
grep -q '^answer (the lowest of the 2 searches): \*\*8 req/s\*\*' "$TMP/rep.md"; check repeat_answer $?
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --rate 4 --slo ttft_p99=30s,itl_p99=10s \
  --search-max 8 --requests 4 --trial-time 1 --trial-warmup 0.2 --trials 1 --repeat 2 -o json >"$TMP/rep.json" 2>/dev/null
jq -e '(.slo.repeats | length) == 2 and .slo.repeats_agree == true and .slo.repeat_spread == 0
       and .slo.trial_time_s == 1 and ([.levels[].search] | unique) == [1, 2]
       and all(.levels[]; .warmup_not_counted >= 1 and .ok >= 3 and .arrivals_realised_per_s > 0)
       and .slo.met_trials[0].metric == "TTFT" and .slo.met_trials[0].ci95_hi_ms >= .slo.met_trials[0].shown_ms' \
  "$TMP/rep.json" >/dev/null
check repeat_json $? "$(head -c 600 "$TMP/rep.json")"
"$CPULM" loadtest --url "$URL" --concurrency 2 --repeat 2 2>/dev/null; check repeat_needs_slo $(($? != 2))
# a closed-loop level of --trial-time: the clients send until it is up
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 2 --trial-time 1 \
  --prompt-scale 0.5 --output-scale 0.5 -o json >"$TMP/tt.json" 2>/dev/null
check trial_time_rc $?
jq -e '.workload == "small x0.5/0.5" and .levels[0].ok >= 2 and .levels[0].warmup_not_counted >= 1
       and .levels[0].wall_s < 3' "$TMP/tt.json" >/dev/null
check trial_time_closed $? "$(head -c 600 "$TMP/tt.json")"

# every request failed (nothing listens on port 1): no percentiles, counted by kind, exit 1
"$CPULM" loadtest --url http://127.0.0.1:1 --wait 0 --concurrency 2 --requests 4 >"$TMP/d.md" 2>"$TMP/d.err"
rc=$?
[ $rc -eq 1 ] && grep -q '| FAILED: 4 of 4 requests failed, no percentiles |' "$TMP/d.md" &&
  grep -q '4 of 4 requests FAILED (connection/stream broken x4' "$TMP/d.md"
check all_failed_no_table $? "rc $rc $(cat "$TMP/d.md")"
"$CPULM" loadtest --url http://127.0.0.1:1 --wait 0 --concurrency 2 --requests 4 -o json \
  >"$TMP/d.json" 2>/dev/null
jq -e '.levels[0].mostly_failed == true and .levels[0].errors == 4 and .levels[0].ttft_ms.p99 == null
       and .levels[0].failures.broken == 4' "$TMP/d.json" >/dev/null
check all_failed_json $? "$(head -c 400 "$TMP/d.json")"

# failures: a one-slot server with a one-request queue answers 429 to most of 12 clients
"$CPULM" loadtest --url "http://127.0.0.1:$BUSY" --concurrency 12 --requests 24 --max-tokens 32 \
  >"$TMP/f.md" 2>"$TMP/f.err"
rc=$?
[ $rc -eq 1 ]; check failures_exit1 $? "rc $rc"
grep -Eq '^\|   12 \| +[0-9]+ \| +[1-9][0-9]* \|' "$TMP/f.md"; check failures_counted $?
grep -q 'requests FAILED (rejected (429/503) x' "$TMP/f.md"; check failures_explained $?
grep -q 'requests failed (see the table); exit 1' "$TMP/f.err"; check failures_stderr $?
nfail=$(sed -n 's/^|   12 | *\([0-9]*\) | *\([0-9]*\) |.*/\2/p' "$TMP/f.md")
if [ "${nfail:-0}" -gt 12 ]; then # mostly failed: no percentile table
  grep -q 'FAILED: .* no percentiles' "$TMP/f.md"; check mostly_failed_no_pcts $?
else
  grep -q '(ok only)' "$TMP/f.md"; check failed_pcts_labelled $?
fi
"$CPULM" loadtest --url "http://127.0.0.1:$BUSY" --concurrency 12 --requests 24 --max-tokens 32 \
  --allow-failures -o json >"$TMP/f.json" 2>/dev/null
rc=$?
[ $rc -eq 0 ] && jq -e '.levels[0].errors > 0 and .levels[0].failures.rejected == .levels[0].errors
  and .levels[0].ok + .levels[0].errors == 24' "$TMP/f.json" >/dev/null
check allow_failures $? "rc $rc $(head -c 300 "$TMP/f.json")"

# plan --check: the model calibrated on one roofline run predicts another
"$CPULM" roofline -t 1 -m "$MODEL" -o json --time 0.02 --buffer-mib 16 -r 1 >"$TMP/r1.json" 2>/dev/null
"$CPULM" plan --calibration "$TMP/r1.json" --check "$TMP/r1.json" >"$TMP/chk.md" 2>"$TMP/chk.err"
check plan_check_rc $? "$(cat "$TMP/chk.err")"
grep -Eq '^\| generation \| [0-9.]+ \| [0-9.]+ \| \+?-?0\.0%' "$TMP/chk.md"; check plan_check_self_exact $? "$(cat "$TMP/chk.md")"
"$CPULM" plan --check "$TMP/r1.json" >/dev/null 2>&1; check plan_check_needs_calibration $(($? != 2))
# ... and the SLO rate of a workload, against a measured rate search
"$CPULM" plan --calibration "$TMP/r1.json" --check "$TMP/r1.json" --workload "$TMP/small.json" \
  --slo ttft_p99=30s,itl_p99=10s --max-batch 4 --measured "$TMP/rep.json" >"$TMP/chk2.md" 2>"$TMP/chk2.err"
check plan_check_slo_rc $? "$(cat "$TMP/chk2.err")"
grep -Eq '^predicted: [0-9.]+ req/s \(Poisson arrivals' "$TMP/chk2.md"; check plan_check_slo_predicted $? "$(cat "$TMP/chk2.md")"
grep -Eq '^\| SLO rate \| 8\.000 \| [0-9.]+ \| [-+][0-9.]+% \|$' "$TMP/chk2.md"; check plan_check_slo_row $?
"$CPULM" plan --calibration "$TMP/r1.json" --check "$TMP/r1.json" --workload "$TMP/small.json" \
  --measured "$TMP/c.json" >/dev/null 2>"$TMP/e"; [ $? -eq 2 ] && grep -q "not an SLO search over rates" "$TMP/e"
check plan_check_slo_needs_rate_search $?

# compare: loadtest and bench results side by side, and the cost-vs-latency chart
mkdir -p "$TMP/cmp"
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 2 --requests 4 \
  --instance c8g.4xlarge -o json >"$TMP/cmp/c8g.json" 2>/dev/null
"$CPULM" loadtest --url "$URL" --workload "$TMP/small.json" --concurrency 1 --requests 4 \
  --instance g6.xlarge -o json >"$TMP/cmp/g6.json" 2>/dev/null
"$CPULM" bench -m "$MODEL" -p 16 -n 4 -r 1 -t 1 -o json >"$TMP/cmp/bench.json" 2>/dev/null
"$CPULM" compare "$TMP/cmp" --svg "$TMP/cmp.svg" >"$TMP/cmp.md" 2>"$TMP/cmp.err"
check compare_rc $? "$(cat "$TMP/cmp.err")"
grep -Eq '^\| .*/c8g\.json \| c8g\.4xlarge \| small \| 2 users \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| - \| - \| measured \(loadtest\)' "$TMP/cmp.md"
check compare_loadtest_row $? "$(cat "$TMP/cmp.md")"
grep -Eq '^\| .*/g6\.json \| g6\.xlarge \|' "$TMP/cmp.md"; check compare_gpu_row $?
grep -Eq '^\| .*/bench\.json \| .* \| [0-9.]+ \| [0-9.]+ \| measured \(bench\)' "$TMP/cmp.md"; check compare_bench_row $?
python3 -c "import sys, xml.dom.minidom as m; d = m.parse(sys.argv[1]); assert len(d.getElementsByTagName('circle')) == 2" "$TMP/cmp.svg"
check compare_svg_two_points $?
echo '{"x": 1}' >"$TMP/other.json"
"$CPULM" compare "$TMP/other.json" >/dev/null 2>&1; check compare_unknown_format $(($? != 1))

# usage errors: exit 2 with a reason
"$CPULM" loadtest --url "$URL" --slo ttft=2s 2>"$TMP/e"; [ $? -eq 2 ] && grep -q "bad objective" "$TMP/e"
check bad_slo $?
"$CPULM" loadtest --url "$URL" --workload nosuch 2>"$TMP/e"; [ $? -eq 2 ] && grep -q "no workload 'nosuch'" "$TMP/e"
check unknown_workload $?
"$CPULM" loadtest --url "$URL" --workload rag --prompt-len 5 2>/dev/null; check workload_and_len_exclusive $(($? != 2))
"$CPULM" loadtest --url "$URL" --rate 0 2>/dev/null; check bad_rate $(($? != 2))
"$CPULM" loadtest --url "$URL" --instance nosuch.large 2>"$TMP/e"; [ $? -eq 2 ] && grep -q "not in" "$TMP/e"
check unknown_instance $?

# plan --workload: estimates for instances not at hand, every row labelled
"$CPULM" plan --shape 1b --type q4_0 --workload rag --instance c8g.4xlarge --users 50 >"$TMP/p.md" 2>"$TMP/p.err"
check plan_estimate_rc $? "$(cat "$TMP/p.err")"
grep -q '^ESTIMATED serving (performance model, not a measurement): workload rag' "$TMP/p.md"
check plan_estimate_header $?
grep -Eq '^\| c8g\.4xlarge \| 16 \| 0\.6381 \| .* \| estimated \|$' "$TMP/p.md"; check plan_estimate_row $?
grep -Eq '^c8g\.4xlarge: [0-9]+ instance\(s\) for 50 concurrent users \(estimated\)$' "$TMP/p.md"
check plan_estimate_instances $?
"$CPULM" plan --shape 1b --type q4_0 --workload rag >"$TMP/pa.md" 2>/dev/null
rows=$(grep -c '^| [cmr][0-9][a-z]*\.[0-9]*xlarge |' "$TMP/pa.md")
est=$(grep -c '| estimated |$' "$TMP/pa.md")
[ "$rows" -ge 8 ] && [ "$rows" -eq "$est" ]; check plan_estimate_all_labelled $? "rows $rows estimated $est"
"$CPULM" plan --shape 1b --workload rag --instance g6.xlarge >/dev/null 2>"$TMP/e"; [ $? -eq 2 ] && grep -q "no instance family for 'g6.xlarge'" "$TMP/e"
check plan_estimate_gpu_refused $?
"$CPULM" plan --shape 1b --workload nosuch >/dev/null 2>&1; check plan_estimate_bad_workload $(($? != 2))

echo "capacity: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
