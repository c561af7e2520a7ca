#!/usr/bin/env bash
# Builds and runs every cpulm test: native Release with gcc and with clang (warnings as
# errors), ASan+UBSan, and the
# aarch64 cross build under qemu-aarch64. Prints each stage's ctest summary and a closing
# "N passed, M failed, K skipped" line over all stages. A skipped test (exit 77: a model, tool
# or CPU feature it needs is missing) counts as skipped, never as passed; ctest's own
# "100% tests passed" counts it as passed, so the skips are taken from its "did not run" list.
set -uo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh || exit 1
export CPULM_SHARED="${CPULM_SHARED:-$(cd .. && pwd)/shared}"
jobs=$(nproc)
total_pass=0
total_fail=0
total_skip=0

# Whole-program shell tests (servers, terminals, every documented command, every flag) run
# natively; the clang stage is for its warnings and the libFuzzer targets, the sanitizer stage
# reruns the server end-to-end suites (network input) under ASan+UBSan but not the slow
# command-line sweeps, so CI stays within its time budget on 2 cores.
E2E_CLI='^(flag_fuzz|migrate|doc_commands|chat_cli|cli_model|bench_cli|manifests|deploy|install|arm_perf)$'
E2E_ALL='^(server_e2e|server_security|hybrid_server|spec_server|flag_fuzz|migrate|doc_commands|chat_cli|cli_model|bench_cli|manifests|deploy|install|arm_perf)$'

# A fresh clone's run on the 2-core VM took 1502 s (2026-12-02: native ~292 s, clang ~124, asan
# ~584, arm64 ~500). ctest starts the long tests first by the COST table in CMakeLists.txt (no
# timing history on a fresh clone); the ASan and qemu stages run the long cases at smaller
# sizes (test_sanitized() / test_emulated() in tests/test.h, CPULM_TEST_SANITIZED for
# server_e2e.sh).
stage() { # name, ctest exclusion regex (or ""), cmake args...
  local name=$1 exclude=$2 t0=$SECONDS; shift 2
  echo "=== stage $name"
  if ! cmake -S . -B "build-ci-$name" -DCPULM_WERROR=ON -DCPULM_SHARED="$CPULM_SHARED" "$@" \
       >"build-ci-$name.log" 2>&1 ||
     ! cmake --build "build-ci-$name" -j"$jobs" >>"build-ci-$name.log" 2>&1; then
    tail -n 40 "build-ci-$name.log"
    echo "stage $name: build failed"
    total_fail=$((total_fail + 1))
    return
  fi
  local out
  out=$(ctest --test-dir "build-ci-$name" -j"$jobs" --output-on-failure ${exclude:+-E "$exclude"} 2>&1)
  echo "$out" | grep -vE '^\s*(Start|[0-9]+/[0-9]+ Test)' | tail -n 60
  # the output of each failed test (the summary above cuts it off): its last 80 lines
  echo "$out" | awk '/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: .*\*\*\*/ && !/\*\*\*Skipped/ { show = 1; n = 0; print; next }
                     /^ *(Start +[0-9]+:|[0-9]+\/[0-9]+ Test +#)/ { show = 0 }
                     show { buf[n++ % 80] = $0 }
                     !show && n { for (i = (n > 80 ? n - 80 : 0); i < n; i++) print buf[i % 80]; n = 0 }
                     END { for (i = (n > 80 ? n - 80 : 0); i < n; i++) print buf[i % 80] }'
  local p f
  p=$(echo "$out" | grep -oE '[0-9]+ tests passed' | head -1 | grep -oE '^[0-9]+' || true)
  f=$(echo "$out" | grep -oE 'tests failed out of [0-9]+' | head -1 | grep -oE '[0-9]+$' || true)
  local failed_n
  failed_n=$(echo "$out" | grep -oE '[0-9]+ tests failed' | head -1 | grep -oE '^[0-9]+' || echo 0)
  local skipped_n
  skipped_n=$(echo "$out" | grep -cE '^\s*[0-9]+ - .* \(Skipped\)$' || true)
  [ -n "$f" ] && total_pass=$((total_pass + f - failed_n - skipped_n)) ||
    total_pass=$((total_pass + ${p:-0} - skipped_n))
  total_fail=$((total_fail + failed_n))
  total_skip=$((total_skip + skipped_n))
  echo "stage $name: $((SECONDS - t0)) s (build and tests)"
}

echo "=== stage format"
if ./scripts/check-format.sh; then total_pass=$((total_pass + 1)); else total_fail=$((total_fail + 1)); fi
stage native "" -DCMAKE_BUILD_TYPE=Release
# The emulated avx512 levels (cmake/emu512.cmake) are built and run in the native stage only:
# their objects cost ~45 s of compile time per stage, and the clang / ASan stages would check
# the same arithmetic again.
# The clang stage is for its warnings and the libFuzzer targets (5 s each): the long model
# groups (the same C run natively and under ASan) are left to those stages.
HEAVY='sched|attn|model|sampler|hybrid'
CC=clang stage clang "${E2E_ALL%)\$}|$HEAVY)\$" -DCMAKE_BUILD_TYPE=Release -DCPULM_FUZZ=ON -DCPULM_EMU512=OFF
# -O1 as the sanitizer documentation advises: the same checks (asserts stay on) at a third of
# -O0's CPU time (server_e2e: 94 s vs 265 s of CPU), which keeps CI within its budget.
stage asan "$E2E_CLI" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG="-g -O1" \
  -DCPULM_SANITIZE=address,undefined -DCPULM_EMU512=OFF
if command -v qemu-aarch64 >/dev/null && command -v aarch64-linux-gnu-gcc >/dev/null; then
  # Under qemu every group runs but the scheduler's, speculation's, the sampler's, the
  # embedding requests' and the schema compiler's: they check architecture-neutral logic over
  # many model steps or samples (a minute or more each of softfloat there) and run in the
  # native and ASan stages; the ARM kernels, attention, model logits, tokenizers and parsers
  # (char is unsigned on aarch64) all run here.
  stage arm64 '^(sched|sched_spec|spec|sampler|embed|schema)$' -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
else
  echo "=== stage arm64: skipped (qemu-aarch64 or aarch64-linux-gnu-gcc not installed)"
  total_skip=$((total_skip + 1))
fi
echo "all stages: $SECONDS s"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
