#!/usr/bin/env bash
# A user's own run is never lost or silently changed (issue 26, items 1-3), on the quickstart deck, one rank:
#
#   own_run.sh CASE TRAIN DECK DATA WORK
#
# rerun     the README's command run twice with the deck as shipped: the second run resumes (no checkpoint
#           deleted); an explicit checkpoint.resume=none + checkpoint.overwrite=true deletes them and says whose
#           (the newest's step, ranks, strategy, and that its deck is this run's).
# changes   resuming with another lr says it in one line and trains on; with another micro_batch (global batch
#           128 -> 64 tokens per step) or other training data it exits 2 naming the difference, and the checkpoint
#           directory is as it was; checkpoint.accept_changes=true continues with the change, saying so.
# stop      SIGUSR1 to a run with no checkpoint.dir: exit 6 (not 3: nothing to resume, do not requeue), saying why;
#           with a checkpoint.dir: exit 3 as before.
set -euo pipefail
case=$1 train=$2 deck=$3 data=$4 work=$5
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work/data"
cd "$work"
ln -s "$data" data/quickstart  # the deck's data paths are data/quickstart/..., relative to the current directory
fail() { echo "FAIL: $*" >&2; exit 1; }
short=(--train.steps=6 --train.eval_every=0 --log.every=100 --checkpoint.every=2)
expect() { # CODE LOG ARGS...: hsdp-train with the deck, exit CODE
  local want=$1 log=$2 code=0
  shift 2
  "$train" --config "$deck" "${short[@]}" "$@" >"$log" 2>&1 || code=$?
  [[ $code == "$want" ]] || { cat "$log" >&2; fail "hsdp-train $* exited $code, expected $want"; }
}

case $case in
  rerun)
    expect 0 first.log --train.stop_at_step=4
    expect 0 second.log
    grep -q "resumed from runs/quickstart/checkpoints/step_4.h5" second.log || fail "the rerun did not resume"
    ! grep -qi "deleted" second.log || fail "the rerun deleted checkpoints: $(grep -i deleted second.log)"
    [[ -f runs/quickstart/checkpoints/step_6.h5 ]] || fail "no step_6.h5"
    expect 0 over.log --checkpoint.resume=none --checkpoint.overwrite=true
    grep -q "deleted the 3 checkpoint(s) in runs/quickstart/checkpoints (step_2.h5, step_4.h5, step_6.h5; the newest, step 6, written .* UTC, by 1 rank(s) with hybrid_shard, from this run's deck)" over.log ||
      fail "the deletion does not say whose checkpoints: $(grep -i deleted over.log)"
    grep -i "deleted" over.log
    ;;
  changes)
    expect 0 first.log --train.stop_at_step=2
    expect 0 lr.log --train.stop_at_step=4 --train.lr=1e-3
    grep -qx "resume: train.lr = 1e-3 (the checkpoint's run: 3e-3)" lr.log || fail "no line for the lr: $(cat lr.log)"
    grep -q "resume: train.stop_at_step" lr.log && fail "a segment key was said"
    before=$(ls -l --time-style=full-iso runs/quickstart/checkpoints | md5sum)
    expect 2 batch.log --train.micro_batch=1
    grep -q "config error: resume: this deck changes what the checkpoint's run trained: global batch 64 tokens per step (the checkpoint's run: 128)" batch.log ||
      fail "the batch change: $(cat batch.log)"
    expect 2 data.log --data.train=data/quickstart/val.bin
    grep -q "data.train = data/quickstart/val.bin (the checkpoint's run: data/quickstart/train.bin)" data.log ||
      fail "the data change: $(cat data.log)"
    [[ $(ls -l --time-style=full-iso runs/quickstart/checkpoints | md5sum) == "$before" ]] ||
      fail "a refused resume changed the checkpoint directory"
    expect 0 accept.log --train.micro_batch=1 --checkpoint.accept_changes=true
    grep -q "warning: resume: continuing with what is trained changed (checkpoint.accept_changes=true): global batch 64" accept.log ||
      fail "the accepted change was not said: $(cat accept.log)"
    grep -h "^resume\|error\|warning" lr.log batch.log data.log accept.log
    ;;
  stop)
    for dir in "" runs/quickstart/checkpoints; do
      want=$([[ -z $dir ]] && echo 6 || echo 3)
      rm -rf runs
      "$train" --config "$deck" --train.steps=100000 --train.eval_every=0 --log.every=1 --checkpoint.dir="$dir" \
        --checkpoint.resume=none >stop.log 2>&1 &
      pid=$!
      for _ in $(seq 600); do grep -q "^step" stop.log && break; sleep 0.1; done
      kill -USR1 "$pid"
      code=0
      wait "$pid" || code=$?
      [[ $code == "$want" ]] || { cat stop.log >&2; fail "checkpoint.dir='$dir': SIGUSR1 gave exit $code, expected $want"; }
      grep "stop requested" stop.log
    done
    grep -q "exiting with code 3 (requeue me)" stop.log || fail "exit 3 not said"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "PASS: $case"
