#!/usr/bin/env bash
# bench_test.sh: end-to-end checks of cpulm bench, roofline, plan and report on a tiny shared
# model: exit codes, output formats (JSON with llama-bench's field names, CSV, markdown),
# --compare, plan figures, and a --quick report whose SVGs must be well-formed XML with the
# expected series. No timing is asserted. Usage: bench_test.sh path/to/cpulm
set -u
CPULM=$1
SHARED=${CPULM_SHARED:-../shared}
MODEL=$SHARED/testdata/models/tiny-llama-q4_0.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0
fail=0
check() { # name, condition result (0 = ok)
  if [ "$2" -eq 0 ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $1"; fi
}
expect_rc() { # name, expected rc, command...
  local name=$1 want=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ "$rc" -eq "$want" ]; local ok=$?
  [ $ok -ne 0 ] && echo "  $name: exit $rc, wanted $want; stderr: $(head -c 300 "$TMP/err")"
  check "$name" $ok
}
py() { # name, python code reading sys.argv[1:]; args...
  local name=$1 code=$2; shift 2
  python3 -c "$code" "$@"; check "$name" $?
}

# ---- usage errors (no model needed) ----
expect_rc bench_help 0 "$CPULM" bench --help
expect_rc bench_bad_threads 2 "$CPULM" bench -t 0
grep -q "bad value '0' for -t" "$TMP/err"; check bench_bad_threads_message $?
expect_rc bench_bad_range 2 "$CPULM" bench -t 8-1
expect_rc bench_bad_output 2 "$CPULM" bench -o xml
expect_rc bench_bad_ctk 2 "$CPULM" bench -ctk q5_1
expect_rc bench_no_tests 2 "$CPULM" bench -p 0 -n 0
expect_rc bench_bad_pg 2 "$CPULM" bench -pg 512
expect_rc bench_unknown 2 "$CPULM" bench --frobnicate
expect_rc bench_missing_model 2 "$CPULM" bench -m "$TMP/none.gguf" -p 8
expect_rc compare_missing 1 "$CPULM" bench --compare "$TMP/a.json" "$TMP/b.json"
expect_rc roofline_help 0 "$CPULM" roofline --help
expect_rc plan_help 0 "$CPULM" plan --help
expect_rc plan_no_model 2 "$CPULM" plan
expect_rc plan_bad_shape 2 "$CPULM" plan --shape 9b
grep -q "known: 1b, 3b, 8b, 70b" "$TMP/err"; check plan_bad_shape_message $?
expect_rc plan_bad_type 2 "$CPULM" plan --shape 8b --type q3_k
expect_rc plan_bench_needs_file 2 "$CPULM" plan --shape 8b --bench
expect_rc report_needs_dir 2 "$CPULM" report -m "$MODEL"
expect_rc report_bad_depths 2 "$CPULM" report -m "$MODEL" -o "$TMP/x" --depths 16,x
grep -q "bad value '16,x' for --depths" "$TMP/err"; check report_bad_depths_message $?

# ---- plan arithmetic without a file ----
expect_rc plan_8b 0 "$CPULM" plan --shape 8b --type q4_0 -c 8192 --parallel 4
grep -q "| KV cache per token | 128.00 KiB (f16), 68.00 KiB (q8_0)" "$TMP/out"; check plan_8b_kv $?
grep -q "| weights | 4.33 GiB |" "$TMP/out"; check plan_8b_weights $?
grep -q "| KV cache total | 4.00 GiB (f16)" "$TMP/out"; check plan_8b_kv_total $?
grep -q "r7g.large" "$TMP/out"; check plan_8b_instances $?
# a hybrid shape: the KV cache of its 8 attention layers, the state of its 24 recurrent ones
expect_rc plan_hybrid 0 "$CPULM" plan --shape qwen35-9b --type q4_0 -c 4096 --parallel 2
grep -q "| KV cache per token | 32.00 KiB (f16), 17.00 KiB (q8_0) | 2 (K, V) x 8 full-attention layers" "$TMP/out"
check plan_hybrid_kv $?
grep -q "| recurrent state | 100.50 MiB | 24 Gated DeltaNet layers x 2 sequences" "$TMP/out"
check plan_hybrid_state $?
expect_rc plan_cost 0 "$CPULM" plan --shape 8b --type q4_k_m --instance c7g.2xlarge --tps 10 --tps-batched 25
grep -q "| c7g.2xlarge | 0.2900 | 10.00 | 8.0556 | 124138 | 25.00 | 3.2222 | 310345 |" "$TMP/out"
check plan_cost_row $?
expect_rc plan_price 0 "$CPULM" plan --shape 1b --type q8_0 --price 1.0 --tps 100
grep -q "| given price | 1.0000 | 100.00 | 2.7778 |" "$TMP/out"; check plan_price_row $?
expect_rc plan_unknown_instance 2 "$CPULM" plan --shape 1b --instance z9.huge --tps 1
# quantize's spelling of types; --instance alone says whether it fits (loudly when not)
expect_rc plan_type_upper 0 "$CPULM" plan --shape 8b --type Q4_K_M
expect_rc plan_instance_small 0 "$CPULM" plan --shape 8b --type q4_0 -c 8192 --parallel 16 --instance c7g.medium
grep -q "is LESS than the .* GiB needed: WARNING" "$TMP/out"; check plan_instance_small_says $?
grep -q "warning: c7g.medium .* is too small" "$TMP/err"; check plan_instance_small_stderr $?
expect_rc plan_instance_fits 0 "$CPULM" plan --shape 1b --type q4_0 --instance c7g.2xlarge
grep -q "instance c7g.2xlarge: 8 vCPU.* holds the" "$TMP/out"; check plan_instance_fits_says $?
grep -q "price tokens on c7g.2xlarge" "$TMP/out"; check plan_instance_no_tps $?
grep -q "deployable today with .cpulm serve.: f16" "$TMP/out"; check plan_deployable_kv $?
expect_rc plan_arch 0 "$CPULM" plan --shape 1b --type q4_0 --arch arm64 --family c7g,m7g
! grep -E "^\| [a-z0-9]+\.[a-z0-9]+ \|" "$TMP/out" | grep -vqE "^\| (c7g|m7g)\."; check plan_family_filter $?
grep -q "| c7g\." "$TMP/out"; check plan_family_kept $?
printf 'x1.big 4 64 arm64 0.5\n' >"$TMP/prices.tsv"
expect_rc plan_own_prices 0 "$CPULM" plan --shape 8b --prices "$TMP/prices.tsv" --tps 5
grep -q "| x1.big | 4 | 64 | arm64 | 0.5000 |" "$TMP/out"; check plan_own_prices_row $?

if [ ! -f "$MODEL" ] || ! command -v python3 >/dev/null; then
  echo "skip: $MODEL or python3 not found"
  echo "$pass passed, $fail failed, 1 part skipped"
  [ "$fail" -eq 0 ] || exit 1
  exit 77
fi

# ---- bench outputs ----
expect_rc bench_json 0 "$CPULM" bench -m "$MODEL" -p 16 -n 4 -r 2 -o json
cp "$TMP/out" "$TMP/a.json"
py bench_json_fields '
import json, sys
rows = json.load(open(sys.argv[1]))
assert len(rows) == 2, rows
for k in ["build_commit", "build_number", "cpu_info", "model_filename", "model_type",
          "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads", "type_k",
          "n_prompt", "n_gen", "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts",
          "samples_ns", "samples_ts", "cpulm_version", "kernel_level", "cpu_name", "date",
          "cpulm_attn"]:
    assert all(k in r for r in rows), k
pp, tg = rows
assert (pp["n_prompt"], pp["n_gen"], tg["n_prompt"], tg["n_gen"]) == (16, 0, 0, 4)
assert len(pp["samples_ns"]) == 2 and len(pp["samples_ts"]) == 2
assert abs(pp["avg_ts"] - sum(pp["samples_ts"]) / 2) < 1e-6 * pp["avg_ts"]
assert all(r["avg_ts"] > 0 and r["type_k"] == "f16" for r in rows)
assert all(r["cpulm_attn"] == "auto" for r in rows)
' "$TMP/a.json"

# quantized KV on a head size that is not a multiple of 32: a message, exit 1, no assertion
expect_rc bench_ctk_q8_0_small_head 1 "$CPULM" bench -m "$SHARED/models/stories260K.gguf" -p 8 -n 0 -r 1 -ctk q8_0
grep -q "multiple of 32" "$TMP/err"; check bench_ctk_q8_0_small_head_message $?
# -ctk and -ctv name the one cache type: one test, not one per spelling
expect_rc bench_ctk_ctv_once 0 "$CPULM" bench -m "$MODEL" -p 8 -n 0 -r 1 -o json -ctk q8_0 -ctv q8_0
py bench_ctk_ctv_once_rows '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [(r["test"], r["type_k"]) for r in rows] == [("pp8", "q8_0")], rows
' "$TMP/out"
# the attention numerics a run took are in its rows: bf16 where the kernel level has bf16
# products (or is the generic oracle), else auto with a note
LEVEL=$("$CPULM" info --cpu 2>/dev/null | sed -n 's/^kernel level: *\([a-z0-9]*\).*/\1/p')
case $LEVEL in avx512bf16 | amx | generic) ATTN=bf16 ;; *) ATTN=auto ;; esac
expect_rc bench_attn_bf16 0 "$CPULM" bench -m "$MODEL" -p 8 -n 0 -r 1 -o json --attn bf16
py bench_attn_bf16_row '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["cpulm_attn"] for r in rows] == [sys.argv[2]], (rows, sys.argv[2])
' "$TMP/out" "$ATTN"
# a level without bf16 products (avx2 here, on any x86 CPU that has it) runs auto and says so
if "$CPULM" info --cpu 2>/dev/null | grep -q 'usable:.* avx2'; then
  expect_rc bench_attn_bf16_avx2 0 env CPULM_ISA=avx2 "$CPULM" bench -m "$MODEL" -p 8 -n 0 -r 1 \
    -o json --attn bf16
  py bench_attn_bf16_avx2_row '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [r["cpulm_attn"] for r in rows] == ["auto"], rows
assert "no bf16 products" in open(sys.argv[2]).read()
' "$TMP/out" "$TMP/err"
fi
# llama-bench -d: n_depth in the JSON, "@ d" in the names, -p 0 / -pg 0,N accepted
expect_rc bench_depth 0 "$CPULM" bench -m "$MODEL" -p 0 -n 4 -pg 0,2 -d 0,40 -r 1 -o json -ctk q4_0
py bench_depth_rows '
import json, sys
rows = json.load(open(sys.argv[1]))
assert [(r["test"], r["n_depth"]) for r in rows] == [("tg4", 0), ("tg2", 0), ("tg4 @ d40", 40), ("tg2 @ d40", 40)], rows
assert all(r["type_k"] == "q4_0" and r["avg_ts"] > 0 for r in rows)
' "$TMP/out"

expect_rc bench_sweep_jsonl 0 "$CPULM" bench -m "$MODEL" -pg 8,4 -npl 1,2 -npp 8 -ntg 4 --ttft 8,16 -t 1,2 -r 2 -o jsonl -ctk q8_0
py bench_sweep_rows '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
assert len(rows) == 2 * (1 + 2 + 2), len(rows)
assert [r["kind"] for r in rows[:5]] == ["pg", "parallel", "parallel", "ttft", "ttft"]
assert sorted({r["n_threads"] for r in rows}) == [1, 2]
par = [r for r in rows if r["kind"] == "parallel"]
assert all(r["tg_avg_ts"] > 0 and r["tg_avg_ts_per_seq"] > 0 and r["pp_avg_ms"] > 0 for r in par)
assert all(abs(r["tg_avg_ts"] - r["n_parallel"] * r["tg_avg_ts_per_seq"]) < 1e-6 * r["tg_avg_ts"] for r in par)
tt = [r for r in rows if r["kind"] == "ttft"]
assert all(r["ttft_ms_p50"] > 0 and r["ttft_ms_p99"] >= r["ttft_ms_p50"] for r in tt)
assert all(r["type_k"] == "q8_0" for r in rows)
' "$TMP/out"

expect_rc bench_csv 0 "$CPULM" bench -m "$MODEL" -p 8 -n 2 -b 4 -ub 2,4 -r 1 -o csv
py bench_csv_rows '
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, rows
assert [r["n_ubatch"] for r in rows] == ["2", "2", "4", "4"] and rows[0]["n_batch"] == "4"
assert rows[0]["test"] == "pp8" and rows[1]["test"] == "tg2" and float(rows[0]["avg_ts"]) > 0
' "$TMP/out"

expect_rc bench_md 0 "$CPULM" bench -m "$MODEL" -p 8 -n 2 -r 1 -t 1
grep -q "| llama 2M Q4_0 | .* | pp8 | " "$TMP/out"; check bench_md_row $?
grep -q "^| model | size | params | kernels | threads |" "$TMP/out"; check bench_md_header $?

expect_rc bench_b 0 "$CPULM" bench -m "$MODEL" -p 16 -n 4 -r 2 -o jsonl
cp "$TMP/out" "$TMP/b.jsonl"
expect_rc compare 0 "$CPULM" bench --compare "$TMP/a.json" "$TMP/b.jsonl"
grep -q "^| pp16 | .* | [0-9.]* |$" "$TMP/out" && grep -q "B/A" "$TMP/out"; check compare_table $?

# ---- roofline ----
expect_rc roofline 0 "$CPULM" roofline -t 1 --buffer-mib 16 --time 0.02 -m "$MODEL" -p 8 -n 4 -r 1 -o json
py roofline_json '
import json, sys
d = json.load(open(sys.argv[1]))
r = d["rows"][0]
assert r["n_threads"] == 1 and r["read_bytes_per_s"] > 0 and r["int8_ops_per_s"] > 0
assert r["f32_flops_per_s"] > 0 and r["tg_ts"] > 0 and r["pp_int8_fraction"] > 0
# the f32 ceiling names its kernel: the attention tile products or the dot (the dot alone
# was load-bound, so prompt attention read as 270% of it on Zen 5)
assert r["f32_peak_kernel"] in ("attention tiles", "f32 dot")
assert d["bytes_per_token"] > 0 and d["matmul_params"] > 0 and d["kv_bytes_per_token"] > 0
assert 0 < r["pp_attn_time_fraction"] < 1 and r["pp_attn_flops_per_s"] > 0
assert r["pp_gemm_int8_fraction"] > r["pp_int8_fraction"]
# the read ceiling of the tg run: the median of its windows (one before the repetition, one after)
w = r["read_bytes_per_s_windows"]
assert len(w) == 2 and len(r["read_bytes_per_s_windows_best"]) == 2 and min(w) > 0
assert abs(r["read_bytes_per_s"] - sum(w) / 2) <= 1e-9 * r["read_bytes_per_s"]
assert all(b >= m for b, m in zip(r["read_bytes_per_s_windows_best"], w))  # a best round >= the mean
assert r["int8_peak_kernel"] in ("Q8_0 dot", "Q4_0 GEMM", "Q8_0 GEMM", "Q4_K GEMM", "Q5_K GEMM",
                                 "Q6_K GEMM")
' "$TMP/out"
expect_rc roofline_md 0 "$CPULM" roofline -t 1 --buffer-mib 16 --time 0.02
grep -q "| read GB/s | int8 peak GOPS | int8 peak kernel | f32 peak GFLOPS | f32 peak kernel |" "$TMP/out"; check roofline_md_table $?

# ---- plan with a file and a measurement ----
expect_rc plan_bench 0 "$CPULM" plan -m "$MODEL" -c 256 --parallel 2 --bench --instance c7g.large
grep -q "measured on this machine" "$TMP/out" && grep -q "^| c7g.large | 0.0725 |" "$TMP/out"
check plan_bench_cost $?

# ---- report ----
# --depths scales the speed-vs-depth section down (quick would fill 1k and 4k tokens)
# --measured: a loadtest result from an instance (its SLO search's answer) joins the estimates
cat >"$TMP/c8g-rag.json" <<'EOF'
{"url": "http://10.0.0.5:8080", "workload": "rag", "stream": true,
 "machine": "c8g.4xlarge (list price as of 2025-01, source aws)",
 "levels": [{"concurrency": 6, "ok": 24, "errors": 0, "requests_per_s": 0.41,
   "ttft_ms": {"p50": 900, "p90": 1500, "p99": 1800}, "itl_ms": {"p50": 60, "p90": 90, "p99": 150},
   "cost": {"usd_per_m_input_tokens": 0.5, "usd_per_m_output_tokens": 3.1,
            "usd_per_k_requests": 0.43}, "slo_met": true}],
 "slo": {"objective": "ttft p99 <= 2 s, itl p99 <= 200 ms", "axis": "concurrency",
   "best": {"concurrency": 6, "ok": 24, "errors": 0, "requests_per_s": 0.41,
   "ttft_ms": {"p50": 900, "p90": 1500, "p99": 1800}, "itl_ms": {"p50": 60, "p90": 90, "p99": 150},
   "cost": {"usd_per_m_input_tokens": 0.5, "usd_per_m_output_tokens": 3.1,
            "usd_per_k_requests": 0.43}, "slo_met": true}}}
EOF
echo "{}" >"$TMP/bad.json"
expect_rc report_measured_bad 2 "$CPULM" report -m "$MODEL" -o "$TMP/x" --measured "$TMP/bad.json"
expect_rc report 0 "$CPULM" report -m "$MODEL" -o "$TMP/rep" --quick -t 1 --depths 0,16,48 \
  --measured "$TMP/c8g-rag.json"
for f in report.md report.html results.json results.csv roofline.json threads.svg pp_length.svg \
         parallel.svg ttft.svg depth.svg roofline.svg cost.svg; do
  [ -s "$TMP/rep/$f" ]; check "report_file_$f" $?
done
py report_svgs '
import re, sys, xml.etree.ElementTree as ET
d = sys.argv[1]
want = {"threads": ["pp32 (prompt)", "tg16 (generation)"],
        "pp_length": ["prompt processing"],
        "parallel": ["aggregate (all sequences)", "per sequence"],
        "ttft": ["mean", "p50", "max"],  # 3 repetitions: too few for a p99
        "depth": ["pp32 (prompt)", "tg16 (generation)"],
        "roofline": ["tg: % of read bandwidth", "pp: % of int8 peak"],
        "cost": None}  # the cheapest estimated instances, 1 to 5 of them
ns = "{http://www.w3.org/2000/svg}"
for name, series in want.items():
    root = ET.parse(f"{d}/{name}.svg").getroot()
    assert root.tag == ns + "svg", root.tag
    got = [g.get("data-name") for g in root.iter(ns + "g") if g.get("class") == "series"]
    if series is None:
        # the measured result first, then the cheapest estimates
        assert 2 <= len(got) <= 5 and got[0] == "c8g.4xlarge (meas.)", (name, got)
        assert all(g.endswith(" (est.)") for g in got[1:]), (name, got)
    else:
        assert got == series, (name, got)
    texts = [t.text for t in root.iter(ns + "text")]
    assert len(texts) > 8, name  # title, axis titles, ticks, legend
    # every chart names the model, the CPU and the date (a copied chart says what it shows)
    assert any(t and re.search(r"\(.*\.gguf\) on .*, \d{4}-\d\d-\d\d", t) for t in texts), name
    for g in root.iter(ns + "g"):
        if g.get("class") == "series":
            assert len(list(g)) >= 1, name  # points or bars
    # measured series carry error bars (stddev over the repetitions) and say so
    n_err = sum(1 for p in root.iter(ns + "path") if p.get("class") == "err")
    if name in ("threads", "pp_length", "parallel", "ttft", "depth"):
        assert n_err > 0, name
        assert any(t and "error bars: \u00b1 1 sample stddev over" in t for t in texts), name
    else:
        assert n_err == 0, name
' "$TMP/rep"
py report_json '
import json, re, sys
rows = json.load(open(sys.argv[1] + "/results.json"))
kinds = [r["kind"] for r in rows]
assert kinds.count("pp") == 1 + 3 + 3 and kinds.count("tg") == 1 + 3, kinds
assert kinds.count("parallel") == 3 and kinds.count("ttft") == 3, kinds
# the depth section: pp then tg at each depth, in order
assert [(r["test"], r["n_depth"]) for r in rows[-6:]] == [
    ("pp32", 0), ("tg16", 0), ("pp32 @ d16", 16), ("tg16 @ d16", 16), ("pp32 @ d48", 48),
    ("tg16 @ d48", 48)], rows[-6:]
html = open(sys.argv[1] + "/report.html").read()
assert html.count("<svg") == 7 and html.rstrip().endswith("</html>")
md = open(sys.argv[1] + "/report.md").read()
for h in ["## Threads", "## Prompt length", "## Parallel sequences", "## Time to first token",
          "## Roofline", "## Cost",
          "## Which instance: workload rag", "![Cost vs latency](cost.svg)",
          "| c8g.4xlarge | - | - | - | - | 1.80 (p99) | 6 | 0.41 | 0.5000 | 3.1000 | 0.4300 | measured (loadtest) |",
          "MEASURED rows (basis `measured`)",
          "ESTIMATED for instances not at hand", "too few for a p99", "## Speed vs depth",
          "![Throughput vs context depth](depth.svg)", "depths 0, 16, 48",
          "--depths: this run stopped at depth 48"]:
    assert h in md, h
# depth table: depth, context = depth + 32 (the longer test) + 1, memory, pp, pp %, tg, tg %
tab = md.split("## Speed vs depth")[1].split("##")[0]
rows = [l.split("|")[1:-1] for l in tab.splitlines() if re.match(r"\| \d", l)]
assert [int(r[0]) for r in rows] == [0, 16, 48] and [int(r[1]) for r in rows] == [33, 49, 81], rows
assert all(r[2].strip().endswith("iB") and float(r[3].split()[0]) > 0 for r in rows), rows
assert rows[0][4].strip() == "100.0%" and rows[0][6].strip() == "100.0%", rows
for r in rows:
    for c in (3, 5):
        assert float(r[c].split()[0]) > 0 and "\u00b1" in r[c], r
assert "p99" not in md.split("## Time to first token")[1].split("##")[0].replace("for a p99", "")
# the first section: the measured result, then one row per instance family labelled
# estimated, before the measured sections; every row says which it is
first = md.split("## Which instance")[1].split("## Threads")[0]
est = [l for l in first.splitlines() if re.match(r"\| [a-z]\d[a-z]*\.\d*xlarge \|", l)]
assert est[0].rstrip().endswith("| measured (loadtest) |"), first
assert len(est) >= 9 and all(l.rstrip().endswith("| estimated |") for l in est[1:]), first
assert md.index("## Which instance") < md.index("## Threads")
' "$TMP/rep"
expect_rc report_compare 0 "$CPULM" bench --compare "$TMP/rep/results.json" "$TMP/rep/results.json"
grep -q "| ttft16 | 1 | 512/512 | f16 | .* | 1.000 |" "$TMP/out"; check report_compare_self $?

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
