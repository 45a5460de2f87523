#!/usr/bin/env bash
# device_check.sh's rerun of a failed GPU gtest under compute-sanitizer, without a GPU: its functions sourced, a fake
# gtest binary that fails two tests (one parameterised) and a fake compute-sanitizer that records its arguments.
# The failed tests must go to memcheck and then racecheck as one --gtest_filter (a crashed binary's last started
# test), the sanitizer's report must reach the run's output, a binary whose tests pass must not be run again, and
# nor must anything once the run's time for the sanitizer is spent. A GEMM epilogue cuBLASLt declined is shown: the
# GPU test's line, and hsdp-train's warnings from every log under OUT, once each.
#
#   device_check_sanitize_test.sh DEVICE_CHECK WORK
set -euo pipefail
device_check=$1 work=$2
rm -rf "$work"
mkdir -p "$work/bin" "$work/sanitizer" "$work/out"

cat >"$work/bin/failing_gpu_test" <<'FAKE'
#!/usr/bin/env bash
for a in "$@"; do [[ $a == --gtest_filter=* ]] && { echo "run again: ${a#--gtest_filter=}"; exit 1; }; done
cat <<'LOG'
[==========] Running 3 tests from 2 test suites.
[ RUN      ] FusedAttention.Bf16_Head64
attention_test.cpp:10: Failure
Expected: (gap) <= (bound), actual: 0.5 vs 0.01
[  FAILED  ] FusedAttention.Bf16_Head64 (3 ms)
[ RUN      ] Shapes/FusedAttentionP.Edges/1
[  FAILED  ] Shapes/FusedAttentionP.Edges/1, where GetParam() = 67 (2 ms)
[ RUN      ] Layers.Gelu
[       OK ] Layers.Gelu (1 ms)
[==========] 3 tests from 2 test suites ran. (6 ms total)
[  PASSED  ] 1 test.
[  FAILED  ] 2 tests, listed below:
[  FAILED  ] FusedAttention.Bf16_Head64
[  FAILED  ] Shapes/FusedAttentionP.Edges/1, where GetParam() = 67

 2 FAILED TESTS
LOG
exit 1
FAKE
cat >"$work/bin/crashing_gpu_test" <<'FAKE'
#!/usr/bin/env bash
for a in "$@"; do [[ $a == --gtest_filter=* ]] && { echo "run again: ${a#--gtest_filter=}"; exit 134; }; done
printf '[ RUN      ] Layers.Gelu\n[       OK ] Layers.Gelu (1 ms)\n[ RUN      ] FusedAttention.Fp32_Head100\n'
exit 134
FAKE
cat >"$work/bin/passing_gpu_test" <<'FAKE'
#!/usr/bin/env bash
printf 'cuBLASLt has no kernel here for D[40x96] = op(A) op(B) with K=72, lda/ldb/ldd 72/96/96, f32 -> f32, %s\n' \
  'GELU-gradient epilogue, ld_aux 96'
printf '[==========] 1 test from 1 test suite ran. (1 ms total)\n[  PASSED  ] 1 test.\n'
FAKE
cat >"$work/sanitizer/compute-sanitizer" <<FAKE
#!/usr/bin/env bash
echo "\$*" >>"$work/calls"
echo "========= COMPUTE-SANITIZER"
[[ \$2 == memcheck ]] && echo "========= Invalid __global__ write of size 4 bytes"
[[ \$2 == racecheck ]] && echo "========= Error: Race reported between Write access and Read access"
shift 4
"\$@"
echo "========= ERROR SUMMARY: 1 error"
FAKE
chmod +x "$work"/bin/* "$work/sanitizer/compute-sanitizer"

# shellcheck source=/dev/null # the path is an argument
source "$device_check"
set -e
# shellcheck disable=SC2034 # read by the sourced functions
dir=$work out=$work/out
fail() { echo "FAIL: $*"; exit 1; }

filter=FusedAttention.Bf16_Head64:Shapes/FusedAttentionP.Edges/1
[[ $(failed_tests <(bash "$work/bin/failing_gpu_test") | paste -sd:) == "$filter" ]] ||
  fail "failed_tests gave $(failed_tests <(bash "$work/bin/failing_gpu_test") | paste -sd' ')"

status=0
PATH=$work/sanitizer:$PATH gtest failing_gpu_test >"$work/failing.out" || status=$?
cat "$work/failing.out"
((status == 1)) || fail "gtest returned $status for a binary with failed tests, not 1"
expected=("--tool memcheck --print-limit 10 $work/bin/failing_gpu_test --gtest_filter=$filter"
          "--tool racecheck --print-limit 10 $work/bin/failing_gpu_test --gtest_filter=$filter")
mapfile -t calls < <(cat "$work/calls" 2>/dev/null)
[[ ${#calls[@]} == 2 && ${calls[0]} == "${expected[0]}" && ${calls[1]} == "${expected[1]}" ]] ||
  fail "compute-sanitizer called as: ${calls[*]}"
grep -q '^========= Invalid __global__ write' "$work/failing.out" || fail "memcheck's report not in the output"
grep -q '^========= Error: Race reported' "$work/failing.out" || fail "racecheck's report not in the output"
grep -q "run again: $filter" "$work/out/failing_gpu_test.racecheck.log" || fail "the binary not run under racecheck"

# A binary that crashed reports no failed test: the last one it started goes to the sanitizer.
rm -f "$work/calls"
status=0
PATH=$work/sanitizer:$PATH gtest crashing_gpu_test >"$work/crashing.out" || status=$?
((status == 134)) || fail "gtest returned $status for a crashed binary, not 134"
mapfile -t calls < <(cat "$work/calls" 2>/dev/null)
[[ ${#calls[@]} == 2 && ${calls[0]} == *"crashing_gpu_test --gtest_filter=FusedAttention.Fp32_Head100" ]] ||
  fail "for a crash compute-sanitizer called as: ${calls[*]}"

# The run's sanitizer time spent: a later failure is not run under it, and says so.
rm -f "$work/calls"
sanitize_seconds=5
PATH=$work/sanitizer:$PATH gtest failing_gpu_test >"$work/spent.out" || true
[[ ! -e $work/calls ]] || fail "compute-sanitizer ran with 5 s of the run's time left"
[[ $(grep -c 'left, not run' "$work/spent.out") == 2 ]] || fail "no line saying the sanitizer's time is spent"

# shellcheck disable=SC2034 # read by the sourced functions
sanitize_seconds=120
PATH=$work/sanitizer:$PATH gtest passing_gpu_test >"$work/passing.out" || fail "gtest failed a passing binary"
[[ ! -e $work/calls ]] || fail "compute-sanitizer ran for a binary whose tests passed"
# A GEMM epilogue that cuBLASLt declined: the test's line in the run's output, and hsdp-train's warnings from every
# log under OUT at the end, each once.
grep -q '^cuBLASLt has no kernel here for D\[40x96\]' "$work/passing.out" || fail "the test's declined GEMM not shown"
mkdir -p "$work/out/selfcheck_lean/no_shard"
gemm="D[8192x3072] = op(A) op(B) with K=768, lda/ldb/ldd 768/3072/3072, f32 -> f32, GELU-gradient epilogue, ld_aux 3072"
for run in straight resumed; do
  printf 'step 1/4 | loss 4.2\nwarning: model.gemm_epilogue=fused: %s %s on this GPU; %s\n' \
    "cuBLASLt has no fused kernel for" "$gemm" "that GEMM runs with the separate kernels" \
    >"$work/out/selfcheck_lean/no_shard/$run.log"
done
mapfile -t declined < <(declined_epilogues)
[[ ${#declined[@]} == 1 && ${declined[0]} == "declined: cuBLASLt has no fused kernel for $gemm on this GPU" ]] ||
  fail "declined_epilogues gave: ${declined[*]}"

if [[ ! -e /usr/local/cuda/bin/compute-sanitizer ]] && ! command -v compute-sanitizer >/dev/null; then
  status=0
  gtest failing_gpu_test >"$work/none.out" || status=$?
  ((status == 1)) || fail "without compute-sanitizer gtest returned $status, not 1"
  grep -q '^no compute-sanitizer on this machine' "$work/none.out" || fail "no line saying compute-sanitizer is missing"
fi
echo "a failed gtest's tests re-run under memcheck and racecheck as one filter; a passing binary's not; declined" \
  "GEMM epilogues named once"
