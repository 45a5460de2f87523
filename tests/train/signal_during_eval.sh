#!/usr/bin/env bash
# SIGTERM during an evaluation (issue 25, item 5): the evaluation stops at its next batch and the run checkpoints and
# exits 3 within seconds, not when the evaluation ends. One rank, the quickstart model, a 2M-token val set (its
# evaluation takes tens of seconds here); the signal comes 1 s into the evaluation of step 2.
#   signal_during_eval.sh HSDP_TRAIN HSDP_DATA DECK WORK
set -euo pipefail
train=$1 data=$2 deck=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$data" synth --out-dir "$work/data" --train-tokens 200000 --val-tokens 2000000 >/dev/null
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$train" --config "$deck" --data.train="$work/data/train.bin" \
  --data.val="$work/data/val.bin" --data.entropy_json= --train.steps=1000 --train.eval_every=2 --train.eval_tokens=0 \
  --log.every=1 --log.dir="$work/log" --checkpoint.dir="$work/ck" --checkpoint.every=0 >"$work/out.log" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q "^step 1/" "$work/out.log" && break; sleep 0.1; done
grep -q "^step 1/" "$work/out.log" || { kill -9 "$pid"; fail "no step 1: $(cat "$work/out.log")"; }
sleep 1  # step 2 takes milliseconds: its evaluation is under way
kill -TERM "$pid"
signalled=$SECONDS
code=0
wait "$pid" || code=$?
took=$((SECONDS - signalled))
cat "$work/out.log"
[[ $code == 3 ]] || fail "exit $code, expected 3"
((took <= 10)) || fail "the run ended $took s after SIGTERM (the evaluation ran to its end)"
grep -q "evaluation at step 2 stopped by a signal after [0-9]* of [0-9]* batches" "$work/out.log" || fail "not said"
grep -q "stop requested by a signal: checkpointed at step 2" "$work/out.log" || fail "no checkpoint at step 2"
[[ -f $work/ck/step_2.h5 ]] || fail "no step_2.h5"
echo "PASS: SIGTERM during the evaluation of step 2: checkpointed and exit 3 in $took s"
