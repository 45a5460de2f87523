#!/usr/bin/env bash
# Runs watchdog_probe under the MPI launcher and checks that the comm watchdog ended the job:
# non-zero exit (the exit code 4 of MPI_Abort, which Open MPI's mpirun passes through), a watchdog line naming the
# collective, group and sequence number, and all of it well within 30 s (the probe's timeout is 2 s).
#   expect_watchdog.sh <launcher and its arguments...> <path to watchdog_probe>
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 <launcher...> <watchdog_probe>" >&2
  exit 2
fi
start=$(date +%s)
output=$(timeout 60 "$@" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
fail() {
  echo "expect_watchdog: FAIL: $*" >&2
  exit 1
}
[ "$status" -ne 124 ] || fail "the job hung: killed by timeout after 60 s"
[ "$status" -ne 0 ] || fail "the job exited 0: the mismatched collectives completed or the watchdog did not abort"
[ "$status" -eq 4 ] || fail "exit status $status, expected 4 (kExitComm, passed through by MPI_Abort)"
pattern="comm watchdog: all_reduce #[0-9]+ on group '(world|probe_other)' \(4 ranks, this is rank [0-3]\) did not complete within 2 s; aborting the job \(exit 4\)"
grep -Eq "$pattern" <<<"$output" || fail "no watchdog line matching: $pattern"
grep -q "comm watchdog: all_reduce #2 on group 'world'" <<<"$output" ||
  fail "no watchdog line for all_reduce #2 on world (ranks 1..3)"
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s (limit 30 s)"
echo "expect_watchdog: OK: exit status $status after ${elapsed} s"
