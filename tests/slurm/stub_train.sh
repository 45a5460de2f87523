#!/usr/bin/env bash
# A stand-in for hsdp-train's checkpoint contract, to test jobscripts/train_requeue.sbatch before (and apart
# from) real checkpoints: it "trains" --train.steps steps of 0.1 s; on SIGUSR1 or SIGTERM it saves its step
# in --checkpoint.dir at the next step boundary and exits 3; with --checkpoint.resume=auto it continues from
# the saved step. Rank 0 (SLURM_PROCID) writes metrics.jsonl and summary.json like hsdp-train, with a loss
# that depends only on the step, so an interrupted run can be compared with an uninterrupted one.
set -uo pipefail
steps=10 log_dir=runs/stub ckpt_dir='' resume=none
for arg in "$@"; do
  case $arg in
  --help) echo "stub_train.sh: --train.steps --log.dir --checkpoint.dir --checkpoint.resume=auto|none"; exit 0 ;;
  --train.steps=*) steps=${arg#*=} ;;
  --log.dir=*) log_dir=${arg#*=} ;;
  --checkpoint.dir=*) ckpt_dir=${arg#*=} ;;
  --checkpoint.resume=*) resume=${arg#*=} ;;
  esac
done
ckpt_dir=${ckpt_dir:-$log_dir/ckpt}
rank=${SLURM_PROCID:-0}
mkdir -p "$log_dir" "$ckpt_dir"

stop=
trap 'stop=1' USR1 TERM
start=0
if [[ $resume == auto && -f $ckpt_dir/latest ]]; then
  start=$(<"$ckpt_dir/latest")
  ((rank == 0)) && echo "stub_train: resumed from step $start"
fi
for ((step = start + 1; step <= steps; step++)); do
  sleep 0.1
  if ((rank == 0)); then
    # 4 / (1 + 0.1 step) to 6 decimals, rounded, in the shell itself: srun signals every process of the step, and a
    # child (awk) that the signal killed left the loss empty.
    micro=$(((80000000 / (10 + step) + 1) / 2))
    printf -v loss '%d.%06d' $((micro / 1000000)) $((micro % 1000000))
    echo "{\"step\":$step,\"loss\":$loss,\"grad_norm\":1.0,\"lr\":0.001}" >>"$log_dir/metrics.jsonl"
    echo "step $step/$steps | loss $loss"
  fi
  if [[ -n $stop ]]; then
    # The checkpoint: written under a temporary name, then renamed (atomic), as hsdp's are. Further stop signals are
    # ignored from here on (and so by mv: an ignored signal stays ignored in children).
    trap '' USR1 TERM
    if ((rank == 0)); then
      echo "$step" >"$ckpt_dir/latest.tmp" && mv "$ckpt_dir/latest.tmp" "$ckpt_dir/latest"
      echo "stub_train: checkpoint at step $step; exit 3"
    fi
    exit 3
  fi
done
((rank == 0)) && echo "{\"steps\":$steps,\"final_loss\":$loss}" >"$log_dir/summary.json"
exit 0
