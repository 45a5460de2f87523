#!/usr/bin/env bash
# The jobscripts under a real Slurm (label slurm): a one-node cluster on this machine (tests/slurm/cluster.sh),
# started and stopped by this script. One check per call:
#
#   slurm_test.sh train_and_study BIN_DIR WORK   train.sbatch with 4 tasks runs to COMPLETED and logs its loss;
#                                                study.sbatch runs 4 array points to COMPLETED; collect sees them
#   slurm_test.sh requeue BIN_DIR WORK           scancel --batch --signal=USR1 mid-run: train_requeue.sbatch
#                                                checkpoints, requeues, resumes, and ends with the same losses and
#                                                final parameters as an uninterrupted run (needs checkpointing:
#                                                skipped until hsdp-train --help lists checkpoint.resume)
#   slurm_test.sh requeue_stub BIN_DIR WORK      the same signal -> exit 3 -> requeue -> resume path of the
#                                                jobscript, with stub_train.sh standing in for hsdp-train
#   slurm_test.sh ntasks_and_site BIN_DIR WORK   `sbatch --ntasks=3` (no --ntasks-per-node) runs 3 ranks, with
#                                                the header's ##SBATCH --account/--partition lines enabled and
#                                                HSDP_MODULES loaded; the same script run by `sbatch -n 3 --wrap`
#                                                (no SLURM_NTASKS_PER_NODE) runs 3 ranks without srun's "can't
#                                                honor --ntasks-per-node"; `sbatch --ntasks=6` (more than the
#                                                header's 4 per node) is accepted and asks for 2 nodes (a second,
#                                                DOWN node is declared: CLUSTER_GHOST_NODES=1)
#
# BIN_DIR holds hsdp-train and hsdp-data (a build's bin/). Exit 77 = skipped (the reason is printed): Slurm
# cannot start here, or the feature under test is missing. Every daemon started is stopped by PID on every
# exit path, and the check fails if any process of the cluster or its jobs is left.
set -euo pipefail
check=$1 bin=$2 work=$3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
train=$bin/hsdp-train
sweep=$repo/tools/sweep/hsdp-sweep
SKIP=77

fail() { echo "FAIL: $*" >&2; [[ -n ${CLUSTER_DIR:-} ]] && cluster_dump_logs >&2; exit 1; }

# (The help text is read whole: `grep -q` on a pipe would stop reading early, and under pipefail hsdp-train's
# SIGPIPE would read as "not listed".)
if [[ $check == requeue && $("$train" --help 2>&1) != *--checkpoint.resume* ]]; then
  echo "SKIP: hsdp-train --help does not list checkpoint.resume: checkpointing is not there yet"
  exit $SKIP
fi

rm -rf "$work"
mkdir -p "$work"
cd "$repo"
# shellcheck source=tests/slurm/cluster.sh
source "$repo/tests/slurm/cluster.sh"
[[ $check == ntasks_and_site ]] && export CLUSTER_GHOST_NODES=1
started=$SECONDS
status=0
cluster_start || status=$?
((status == 0)) || exit "$status"
echo "cluster up in $((SECONDS - started)) s"
conf=$SLURM_CONF

"$bin/hsdp-data" synth --out-dir "$work/data" >/dev/null
data_args=(--data.train="$work/data/train.bin" --data.val="$work/data/val.bin"
  --data.entropy_json="$work/data/source.json" --parallel.sharding=no_shard)
export HSDP_TRAIN=$train

# Fails unless every line of the job's states says COMPLETED with exit 0:0.
expect_completed() {
  local job=$1 timeout=$2 states
  states=$(cluster_wait_job "$job" "$timeout") || fail "job $job: $states"
  echo "  ${states//$'\n'/$'\n  '}"
  awk '$3 != "COMPLETED" || $4 != "0:0" { bad = 1 } END { exit bad }' <<<"$states" ||
    fail "job $job did not complete: $states"
}

# slurmstepd processes of this cluster: they carry its SLURM_CONF in their environment.
our_steps() {
  local pid
  for pid in $(pgrep -x slurmstepd || true); do
    grep -qasF "SLURM_CONF=$conf" "/proc/$pid/environ" && echo "$pid"
  done
  return 0
}

# Every process this test started is gone: the daemons (by PID), job steps, ranks (their command lines name
# files under $work).
expect_nothing_left() {
  local pids=("${CLUSTER_PIDS[@]}") pid left steps
  cluster_stop
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && fail "daemon pid $pid still runs"; done
  for _ in $(seq 50); do
    steps=$(our_steps)
    left=$(pgrep -f -- "(hsdp-train|stub_train).*$work" || true)
    [[ -z $steps && -z $left ]] && break
    sleep 0.2
  done
  [[ -z $steps ]] || fail "slurmstepd left behind: $steps"
  [[ -z $left ]] || fail "processes left behind: $(pgrep -af -- "(hsdp-train|stub_train).*$work")"
  echo "daemons stopped; no process left (pgrep: no slurmstepd of this cluster, no hsdp-train of this test)"
}

case $check in
train_and_study)
  # 4 ranks of train.sbatch on the node declared with 4 CPUs (this machine may have 2 cores).
  job=$(sbatch --parsable --chdir="$repo" --nodes=1 --ntasks-per-node=4 --cpus-per-task=1 --time=5 \
    --output="$work/train-%j.out" jobscripts/train.sbatch input/quickstart.ini "${data_args[@]}" \
    --train.steps=20 --train.eval_every=10 --train.eval_tokens=2048 --log.every=5 --log.dir="$work/train" \
    --checkpoint.dir="$work/train_ckpt")
  echo "train.sbatch: job $job"
  expect_completed "$job" 120
  out=$work/train-$job.out
  cat "$out"
  grep -qE '^step 20/20 \| loss [0-9.]+' "$out" || fail "no loss line for step 20 in $out"
  grep -q '"world_size":4' "$work/train/summary.json" || fail "summary.json: not 4 ranks"

  # A 4-point study (micro_batch x lr) as one job array, 2 ranks per point.
  cat >"$work/study.ini" <<EOF
[study]
name = slurm
base = $repo/input/quickstart.ini
[fixed]
parallel.sharding = no_shard
data.train = $work/data/train.bin
data.val = $work/data/val.bin
data.entropy_json = $work/data/source.json
train.steps = 10
train.eval_every = 10
train.eval_tokens = 2048
[axes]
train.micro_batch = 1,2
train.lr = 1e-3,3e-3
EOF
  "$sweep" expand "$work/study.ini" --out "$work/study" >/dev/null
  job=$(sbatch --parsable --chdir="$repo" --array=0-3 --ntasks=2 --cpus-per-task=1 --time=5 \
    --output="$work/study-%A_%a.out" jobscripts/study.sbatch "$work/study")
  echo "study.sbatch: array job $job"
  expect_completed "$job" 120
  [[ $(cluster_job_states "$job" | wc -l) == 4 ]] || fail "expected 4 array tasks"
  for i in 0 1 2 3; do
    [[ $(cat "$work/study/point_$i/exit_code") == 0 ]] || fail "point $i: exit_code $(cat "$work/study/point_$i/exit_code")"
  done
  "$sweep" collect "$work/study" >"$work/collect.out"
  [[ $(grep -c '| ok |$' "$work/study/results.md") == 4 ]] || fail "results.md: $(cat "$work/study/results.md")"
  grep '^| ' "$work/study/results.md"
  expect_nothing_left
  echo "train.sbatch (4 tasks) and study.sbatch (4 points) COMPLETED in $((SECONDS - started)) s"
  ;;

requeue | requeue_stub)
  if [[ $check == requeue ]]; then
    steps=80
    run_args=(input/quickstart.ini "${data_args[@]}" --train.steps="$steps" --train.eval_every=0 --log.every=10
      --checkpoint.every="$steps")
  else
    steps=40
    export HSDP_TRAIN=$repo/tests/slurm/stub_train.sh
    run_args=(input/quickstart.ini --train.steps="$steps")
  fi
  # --signal: the script's own warning (USR1 300 s before the limit) is due at the start of every run of a 5-minute
  # job and comes whenever slurmctld's periodic check falls into a run (it once killed a requeued run's task before
  # hsdp-train had installed its handler). Here USR1 comes from the test alone.
  submit() { # $1 = name: log dir $work/$1, checkpoints $work/$1_ckpt
    sbatch --parsable --chdir="$repo" --nodes=1 --ntasks-per-node=4 --cpus-per-task=1 --time=5 --signal=B:USR1@30 \
      --output="$work/$1-%j.out" --export=ALL,HSDP_CKPT_DIR="$work/$1_ckpt" jobscripts/train_requeue.sbatch \
      "${run_args[@]}" --log.dir="$work/$1"
  }
  # The uninterrupted reference, then the same run signalled as Slurm does before the time limit.
  ref=$(submit ref)
  expect_completed "$ref" 180
  job=$(submit int)
  for _ in $(seq 600); do
    [[ -f $work/int/metrics.jsonl && $(wc -l <"$work/int/metrics.jsonl") -ge 10 ]] && break
    sleep 0.1
  done
  scancel --batch --signal=USR1 "$job"
  echo "sent USR1 to the batch shell of job $job after $(wc -l <"$work/int/metrics.jsonl") steps"
  # Slurm starts a requeued job again after cred_expire seconds (10 on this test cluster, 120 by default).
  expect_completed "$job" 180
  out=$work/int-$job.out
  cat "$out"
  grep -q "checkpointed (exit 3): requeueing job $job" "$out" || fail "the job did not checkpoint and requeue"
  [[ $(grep -c "train_requeue.sbatch: job $job run" "$out") == 2 ]] || fail "the output (appended) does not show 2 runs"
  python3 - "$work/ref" "$work/int" "$steps" <<'PY'
import json, sys
ref_dir, int_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
ref = {m["step"]: m for m in map(json.loads, open(f"{ref_dir}/metrics.jsonl"))}
got = {}
for m in map(json.loads, open(f"{int_dir}/metrics.jsonl")):
    got[m["step"]] = m  # a resumed run may log again steps it repeats: the last word counts
assert steps in got and len(got) >= steps - 30, f"steps logged: {sorted(got)}"
for step in sorted(got):
    for key in ("loss", "grad_norm", "lr"):
        assert got[step][key] == ref[step][key], f"step {step}: {key} {got[step][key]!r} != {ref[step][key]!r}"
a, b = json.load(open(f"{ref_dir}/summary.json")), json.load(open(f"{int_dir}/summary.json"))
assert a["final_loss"] == b["final_loss"], (a["final_loss"], b["final_loss"])
print(f"resumed run: steps {min(got)}..{steps}: loss, grad_norm and lr identical to the uninterrupted run")
PY
  if [[ $check == requeue ]]; then
    # The final parameters: both runs checkpoint at the last step (checkpoint.every = steps).
    ref_h5=$(find "$work/ref_ckpt" \( -name '*.h5' -o -name '*.hdf5' \) -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-)
    int_h5=$(find "$work/int_ckpt" \( -name '*.h5' -o -name '*.hdf5' \) -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2-)
    [[ -n $ref_h5 && -n $int_h5 ]] || fail "no final checkpoint (*.h5, *.hdf5) in $work/ref_ckpt or $work/int_ckpt"
    if command -v h5diff >/dev/null; then
      h5diff "$ref_h5" "$int_h5" /model /model || fail "final parameters differ: $ref_h5 vs $int_h5"
      echo "final parameters identical: h5diff $ref_h5 $int_h5 /model"
    else
      echo "h5diff not installed (hdf5-tools): final checkpoints not compared"
    fi
  fi
  expect_nothing_left
  echo "$check: checkpoint, requeue and resume in $((SECONDS - started)) s"
  ;;

ntasks_and_site)
  train_args=(input/quickstart.ini "${data_args[@]}" --train.steps=10 --train.eval_every=0 --log.every=5
    --checkpoint.dir=)
  # A job field from `scontrol show job`.
  job_field() { scontrol --oneliner show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
  # Every line of the output without srun's warning about a --ntasks-per-node that does not fit the job.
  expect_no_srun_warning() {
    ! grep -q "can't honor --ntasks-per-node" "$1" || fail "srun got a --ntasks-per-node the job did not ask for: $(cat "$1")"
  }

  # 1. --ntasks alone, through the header; its site lines enabled; a module loaded through HSDP_MODULES (the
  #    function `module`, as Lmod defines it, reaches the job in its environment).
  sed -e 's/^##SBATCH --account=.*/#SBATCH --account=hsdp-test/' -e 's/^##SBATCH --partition=.*/#SBATCH --partition=debug/' \
    jobscripts/train.sbatch >"$work/train_site.sbatch"
  grep -q '^#SBATCH --account=hsdp-test' "$work/train_site.sbatch" || fail "train.sbatch has no ##SBATCH --account line"
  grep -q '^#SBATCH --partition=debug' "$work/train_site.sbatch" || fail "train.sbatch has no ##SBATCH --partition line"
  module() { echo "module $*"; }
  export -f module
  job=$(HSDP_MODULES=hsdp-test/1.0 sbatch --parsable --chdir="$repo" --ntasks=3 --time=5 --output="$work/site-%j.out" \
    "$work/train_site.sbatch" "${train_args[@]}" --log.dir="$work/site")
  echo "sbatch --ntasks=3 train.sbatch (site lines enabled): job $job"
  expect_completed "$job" 180
  cat "$work/site-$job.out"
  [[ $(job_field "$job" Account) == hsdp-test ]] || fail "job $job: Account=$(job_field "$job" Account), not hsdp-test"
  [[ $(job_field "$job" Partition) == debug ]] || fail "job $job: Partition=$(job_field "$job" Partition)"
  grep -qx "module load hsdp-test/1.0" "$work/site-$job.out" || fail "HSDP_MODULES was not loaded"
  grep -q '"world_size":3' "$work/site/summary.json" || fail "summary.json: not 3 ranks"
  expect_no_srun_warning "$work/site-$job.out"
  echo "  Account=hsdp-test Partition=debug, module load hsdp-test/1.0, 3 ranks"

  # 2. The same script in a job asked for with --ntasks alone and no header (sbatch --wrap, as salloc -n 3 is).
  printf -v wrap '%q ' bash jobscripts/train.sbatch "${train_args[@]}" --log.dir="$work/wrap"
  job=$(sbatch --parsable --chdir="$repo" --ntasks=3 --time=5 --output="$work/wrap-%j.out" --wrap "$wrap")
  echo "sbatch --ntasks=3 --wrap 'bash train.sbatch ...': job $job"
  expect_completed "$job" 180
  grep -q '"world_size":3' "$work/wrap/summary.json" || fail "summary.json (--wrap): not 3 ranks: $(cat "$work/wrap-$job.out")"
  expect_no_srun_warning "$work/wrap-$job.out"
  echo "  3 ranks, no srun warning"

  # 3. More ranks than the header's --ntasks-per-node=4 with --ntasks alone: Slurm spreads them over 2 nodes (the
  #    second is DOWN here, so the job waits; before, the header's --nodes=1 had it rejected).
  job=$(sbatch --parsable --chdir="$repo" --ntasks=6 --time=5 --output="$work/six-%j.out" jobscripts/train.sbatch \
    "${train_args[@]}" 2>"$work/six.err") || fail "sbatch --ntasks=6 train.sbatch rejected: $(cat "$work/six.err")"
  nodes=$(job_field "$job" NumNodes) tasks=$(job_field "$job" NumTasks)
  echo "sbatch --ntasks=6 train.sbatch: job $job $(job_field "$job" JobState), NumNodes=$nodes NumTasks=$tasks"
  [[ $nodes == 2 && $tasks == 6 ]] || fail "job $job: NumNodes=$nodes NumTasks=$tasks, expected 2 and 6"
  scancel "$job"
  expect_nothing_left
  echo "ntasks_and_site: --ntasks without --ntasks-per-node, site lines and modules in $((SECONDS - started)) s"
  ;;

*)
  fail "unknown check '$check'"
  ;;
esac
