#!/usr/bin/env bash
# Crash safety: a rank SIGKILLed in the middle of a 4-rank save leaves the previous checkpoint intact, `latest`
# still naming it, and resolve_resume("auto") returning it; the next save succeeds and cleans up.
#   crash_test.sh PROBE MPIEXEC...
set -euo pipefail
probe=$1
shift
mpiexec=("$@")
dir=$(mktemp -d "${TMPDIR:-/tmp}/hsdp_ckpt_crash.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# A killed job cannot remove its shared-memory segments: keep them in the test's directory, not /dev/shm.
mkdir -p "$dir/shm"
export OMPI_MCA_btl_vader_backing_directory=$dir/shm

"${mpiexec[@]}" "$probe" save "$dir" 1
[[ $(cat "$dir/latest") == step_1.h5 ]] || fail "latest should name step_1.h5 after the first save"
sum_before=$(cksum < "$dir/step_1.h5")

# The second save sleeps after its model tensors are written, before the file is closed; kill rank 1 there.
rm -f "$dir"/pid.*
HSDP_CKPT_PAUSE_IN_WRITE=60 timeout 120 "${mpiexec[@]}" -x HSDP_CKPT_PAUSE_IN_WRITE "$probe" save "$dir" 2 \
  > "$dir/save2.log" 2>&1 &
launcher=$!
for _ in $(seq 1 300); do
  [[ -f "$dir/step_2.h5.tmp" && -f "$dir/pid.1" ]] && break
  sleep 0.1
done
[[ -f "$dir/step_2.h5.tmp" ]] || { cat "$dir/save2.log" >&2; fail "the second save never started writing"; }
sleep 2  # well inside the 60 s pause: the model datasets are written, the file is still open
victim=$(cat "$dir/pid.1")
kill -KILL "$victim"
echo "killed rank 1 (pid $victim) during the save of step 2"
status=0
wait "$launcher" || status=$?
[[ $status -ne 0 ]] || fail "the killed save exited 0"
[[ $status -ne 124 ]] || fail "the job did not end after a rank was killed (timeout)"

[[ $(cat "$dir/latest") == step_1.h5 ]] || fail "latest changed to '$(cat "$dir/latest")'"
[[ ! -e "$dir/step_2.h5" ]] || fail "step_2.h5 exists although its save was killed"
[[ $(cksum < "$dir/step_1.h5") == "$sum_before" ]] || fail "step_1.h5 changed"
"${mpiexec[@]}" "$probe" check "$dir" 1 || fail "step_1.h5 is not intact, or resolve_resume(auto) does not name it"

# A new save of step 2 overwrites the leftover temporary file and commits.
"${mpiexec[@]}" "$probe" save "$dir" 2
[[ $(cat "$dir/latest") == step_2.h5 ]] || fail "latest should name step_2.h5 after the repeated save"
[[ ! -e "$dir/step_2.h5.tmp" ]] || fail "step_2.h5.tmp left behind"
"${mpiexec[@]}" "$probe" check "$dir" 2 || fail "the repeated save of step 2 does not load"
echo "crash test passed"
