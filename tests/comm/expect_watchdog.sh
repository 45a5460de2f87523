#!/usr/bin/env bash
# Runs watchdog_probe in one of its modes under the MPI launcher and checks that the comm watchdog ended the job:
# non-zero exit (the exit code 4 of MPI_Abort, which Open MPI's mpirun passes through), watchdog lines naming the
# collective, group and sequence number AND exactly the ranks that had not reached it (read over the side channel),
# and all of it well within 30 s (the probe's timeout is 2 s). Mode silent runs the probe's skip mode where the side
# channel cannot reach ranks 2 and 3 (Open MPI's osc/pt2pt needs the target in MPI): the watchdog must say so and
# still abort with exit 4 in bounded time.
#   expect_watchdog.sh <mode: mismatched | skip | silent> <launcher and its arguments...> <path to watchdog_probe>
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 <mismatched|skip|silent> <launcher...> <watchdog_probe>" >&2
  exit 2
fi
mode=$1
shift
start=$(date +%s)
probe_mode=$mode
[ "$mode" != silent ] || probe_mode=skip
output=$(timeout 60 "$@" "$probe_mode" 2>&1)
status=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$output"
fail() {
  echo "expect_watchdog ($mode): FAIL: $*" >&2
  exit 1
}
# The ranks named as not having reached all_reduce #<sequence> on <group>, one list per watchdog line of that
# collective ("NONE" for a line that names none); every such list must be <expected>, and there must be one.
expect_laggards() {
  local group=$1 sequence=$2 expected=$3
  local head="comm watchdog: all_reduce #$sequence on group '$group' \(4 ranks, this is rank [0-3]\) did not complete"
  local lines lists
  lines=$(grep -E "$head" <<<"$output")
  [ -n "$lines" ] || fail "no watchdog line for all_reduce #$sequence on group '$group'"
  lists=$(sed -E "s/.*within 2 s; ranks? ([0-9, ]+) of group '$group' (has|have) not reached it .*/\\1/;t;s/.*/NONE/" \
          <<<"$lines")
  while IFS= read -r list; do
    [ "$list" = "$expected" ] ||
      fail "a watchdog line on '$group' names ranks '$list' as not having reached #$sequence, expected '$expected'"
  done <<<"$lists"
}
[ "$status" -ne 124 ] || fail "the job hung: killed by timeout after 60 s"
[ "$status" -ne 0 ] || fail "the job exited 0: the collectives completed or the watchdog did not abort"
[ "$status" -eq 4 ] || fail "exit status $status, expected 4 (kExitComm, passed through by MPI_Abort)"
pattern="comm watchdog: all_reduce #[0-9]+ on group '(world|probe_other)' \(4 ranks, this is rank [0-3]\) did not complete within 2 s; .*; aborting the job \(exit 4\)"
grep -Eq "$pattern" <<<"$output" || fail "no watchdog line matching: $pattern"
case "$mode" in
  mismatched)
    # Rank 0 issued its all_reduce on probe_other, so on world only rank 0 is still at #1; on probe_other (rank 0's
    # line, when it gets to print before another rank's abort) ranks 1..3 issued nothing.
    expect_laggards world 2 "0"
    if grep -q "all_reduce #1 on group 'probe_other'" <<<"$output"; then expect_laggards probe_other 1 "1, 2, 3"; fi
    ;;
  skip)
    expect_laggards world 2 "2, 3"
    grep -Eq "comm watchdog: .*this is rank [23]\)" <<<"$output" && fail "ranks 2 and 3 never waited, yet printed"
    grep -q "rank 2: world rank 2 on host " <<<"$output" || fail "the watchdog line does not say where rank 2 is"
    ;;
  silent)
    grep -Eq "comm watchdog: all_reduce #2 on group 'world' .* did not answer (on the side channel )?within" \
      <<<"$output" || fail "no watchdog line saying that the side channel did not answer"
    grep -Eq "ranks? [0-9, ]+ of group 'world' (has|have) not reached it" <<<"$output" &&
      fail "ranks named as behind although the side channel could not reach them"
    ;;
  *) fail "unknown mode '$mode'" ;;
esac
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s (limit 30 s)"
echo "expect_watchdog ($mode): OK: exit status $status after ${elapsed} s"
