#!/usr/bin/env bash
# Bad input to the MPI programs, started as 2 ranks: exit 2 with the message once (rank 0's), never once per rank and
# never a crash or a run that does not end (unsigned options given "-1" wrap to 2^64 - 1: caught by upper bounds).
# hsdp-ckpt and hsdp-sample, one-process tools, refuse to start as 2 ranks (each would do the whole command and write
# the same output).
#   bad_input_once_test.sh BIN_DIR WORK [MPIRUN]
set -euo pipefail
bin=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"
mpirun=("${3:-mpirun}" --oversubscribe -np 2)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# expect TEXT PROGRAM ARGS...: under mpirun -np 2, exit 2 and TEXT exactly once in what the job printed.
expect() {
  local text=$1 code=0 count
  shift
  timeout 120 "${mpirun[@]}" "$@" >out 2>&1 || code=$?
  count=$(grep -cF -- "$text" out || true)
  [[ $code == 2 && $count == 1 ]] || fail "$*: exit $code, '$text' $count time(s): $(cat out)"
  echo "$(basename "$1") ${*:2}: exit 2, said once"
}
expect "--max-bytes must be in [4, 1 TiB]" "$bin/hsdp-commbench" --max-bytes -1
expect "each rank fills two buffers of that size, and the 2 rank(s) on host $(hostname) need 4194304 MiB, more than its" \
  "$bin/hsdp-commbench" --max-bytes 1099511627776
expect "--max-iters must be >= 2, got -5" "$bin/hsdp-commbench" --max-iters -5
expect "--factor must be in [2, 1024]" "$bin/hsdp-commbench" --factor -2
expect "--comm.timeout_s must be > 0" "$bin/hsdp-commbench" --comm.timeout_s -1
expect "unrecognised option '--bogus'" "$bin/hsdp-bench-ckpt" --bogus
expect "--io must be single_call, per_dataset or both, not 'bogus'" "$bin/hsdp-bench-ckpt" --io bogus
expect "--reps must be >= 1, got -2" "$bin/hsdp-bench-ckpt" --reps -2
if [[ -x $bin/hsdp-bench-train-gpu ]]; then # built where CUDA is
  expect "--steps (-1) must be >= 1" "$bin/hsdp-bench-train-gpu" --device cpu --steps -1
  expect "unknown option 'foo.bar'" "$bin/hsdp-bench-train-gpu" --device cpu --set foo.bar=1
fi
# device.type=cuda: the ranks gather what GPUs each sees before any refuses (a collective every rank reaches). With no
# GPU visible to them (CUDA_VISIBLE_DEVICES empty, on any machine) each sees none; without CUDA, the build says so.
if [[ -x $bin/hsdp-bench-train-gpu ]]; then # built where CUDA is
  expect "device.type=cuda: no CUDA device is visible on this node" env CUDA_VISIBLE_DEVICES= "$bin/hsdp-train" \
    --device.type=cuda
else
  expect "built without the CUDA backend" "$bin/hsdp-train" --device.type=cuda
fi
expect "hsdp-ckpt runs as one process" "$bin/hsdp-ckpt" verify nothing.h5
expect "hsdp-sample runs as one process" "$bin/hsdp-sample" nothing.h5 --prompt-ids 1
echo PASS
