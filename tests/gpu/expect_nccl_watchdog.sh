#!/usr/bin/env bash
# Runs nccl_watchdog_probe on one rank and checks that the comm watchdog ended the job: exit 4, a watchdog line
# naming all_reduce #1 on group 'gpu_world' (NCCL), well within 30 s (the probe's timeout is 1 s, its hang 10 s).
# Without a visible GPU it prints the reason and exits 77 (skipped).
#   expect_nccl_watchdog.sh <gpu_probe> <launcher and its arguments...> -- <nccl_watchdog_probe>
set -u
# shellcheck source=gpu_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
require_gpu "$1"
shift
split_launcher "$@"
start=$(date +%s)
output=$(timeout 60 "${launcher[@]}" -np 1 "${program[@]}" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
fail() {
  echo "expect_nccl_watchdog: FAIL: $*" >&2
  exit 1
}
[ "$status" -ne 124 ] || fail "the job hung: killed by timeout after 60 s"
[ "$status" -ne 0 ] || fail "the job exited 0: the collective completed or the watchdog did not abort"
[ "$status" -eq 4 ] || fail "exit status $status, expected 4 (kExitComm, passed through by MPI_Abort)"
pattern="comm watchdog: all_reduce #1 on group 'gpu_world' \(NCCL, 1 ranks, this is rank 0\) did not complete within 1 s"
grep -Eq "$pattern" <<<"$output" || fail "no watchdog line matching: $pattern"
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s (limit 30 s)"
echo "expect_nccl_watchdog: OK: exit status $status after ${elapsed} s"
