#!/usr/bin/env bash
# The replica check (check.replicas_every, train/replicas.hpp) through hsdp-train on 4 ranks, with HSDP_FAULT's bit
# flips (the lowest mantissa bit of one element on one rank):
#  1. no_shard (4 replicas of everything), the master weights of rank 2 flipped after step 5, a check every 4 steps
#     and a checkpoint every 4: exit 7 at step 8 with one line naming the step, the unit, rank 2 against ranks 0, 1,
#     3; no checkpoint of step 8, `latest` still step 4; resumed from it without the fault, the run ends with the
#     uninterrupted run's every tensor, bit for bit;
#  2. hybrid_shard and hybrid_shard_zero2 on 2 emulated nodes (2 replicas of each range): AdamW's m, then v, flipped
#     on one rank right before a check: both replicas named (no majority), and the tensor;
#  3. two islands (full_shard inside): the outer parameters flipped on one rank: the two islands' ranks at that place
#     named;
#  4. the state a run starts from (update=0): caught by the check before step 1; zero1's gathered full parameters
#     (every rank holds them whole) flipped on one rank: caught, the rank named against the three others;
#  5. full_shard holds nothing twice: the run says the check compares nothing; check.replicas_every=0 turns it off.
set -euo pipefail
bin=$1 deck=$2 data=$3 run=$4
mpiexec=$5
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
train=$bin/hsdp-train ckpt=$bin/hsdp-ckpt
launch() { "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$train" "$@"; }
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.steps=12 --train.eval_every=0 --log.every=100 --device.threads=1 --check.replicas_every=4)
rm -rf "$run"
mkdir -p "$run"
fail() { echo "FAIL: $*" >&2; exit 1; }
# Runs hsdp-train with HSDP_FAULT=$1 and the rest as its arguments; expects exit 7 and one error line holding every
# pattern in $expect (an array of grep -E patterns); prints the line.
expect=()
caught() {
  local fault=$1; shift
  set +e
  out=$(HSDP_FAULT=$fault launch "${common[@]}" "$@" 2>&1)
  local rc=$?
  set -e
  [ $rc = 7 ] || fail "exit $rc (not 7) with HSDP_FAULT=$fault $*: $out"
  local line
  line=$(grep "^hsdp-train: replica check at step" <<<"$out") || fail "no replica check line with HSDP_FAULT=$fault: $out"
  [ "$(wc -l <<<"$line")" = 1 ] || fail "more than one error line: $line"
  for pattern in "${expect[@]}"; do grep -Eq "$pattern" <<<"$line" || fail "no '$pattern' in: $line"; done
  echo "$line"
}

echo "== 1. no_shard: one rank's master weights, caught at the next check, before the checkpoint"
launch "${common[@]}" --parallel.sharding=no_shard --checkpoint.every=4 --log.dir="$run/straight" \
  --checkpoint.dir="$run/straight_ckpt" >/dev/null
expect=("at step 8: unit embedding" "the master weights of rank 2 \(host [^)]*\) differ from those of ranks 0, 1, 3"
        "which agree" "exit 7" "the newest checkpoint, step 4, stays .latest.")
caught "flip=params:update=5@2" --parallel.sharding=no_shard --checkpoint.every=4 --log.dir="$run/flipped" \
  --checkpoint.dir="$run/flipped_ckpt"
[ "$(cat "$run/flipped_ckpt/latest")" = step_4.h5 ] || fail "latest is $(cat "$run/flipped_ckpt/latest"), not step_4.h5"
if [ -e "$run/flipped_ckpt/step_8.h5" ] || [ -e "$run/flipped_ckpt/step_8.h5.tmp" ]; then
  fail "a checkpoint of step 8 was written"
fi
launch "${common[@]}" --parallel.sharding=no_shard --checkpoint.every=4 --log.dir="$run/flipped" \
  --checkpoint.dir="$run/flipped_ckpt" >/dev/null
diff <("$ckpt" inspect "$run/straight_ckpt/step_12.h5" | grep checksum) \
     <("$ckpt" inspect "$run/flipped_ckpt/step_12.h5" | grep checksum) >/dev/null \
  || fail "resumed from step 4, the run does not end as the uninterrupted one"
echo "resumed from step 4 without the fault: every tensor of step 12 equals the uninterrupted run's"

echo "== 2. hybrid_shard (AdamW m) and hybrid_shard_zero2 (AdamW v): two replicas, both named"
expect=("at step 4: unit embedding" "ranks 1, 3 \(hosts [^)]*\) hold 2 replicas of it with different AdamW m"
        "no majority")
caught "flip=exp_avg:update=4@3" --parallel.sharding=hybrid_shard --topology.ranks_per_node=2 --checkpoint.dir= \
  --log.dir="$run/hybrid"
expect=("at step 4: unit embedding" "ranks 0, 2 \(hosts [^)]*\) hold 2 replicas of it with different AdamW v")
caught "flip=exp_avg_sq:update=4@0" --parallel.sharding=hybrid_shard_zero2 --topology.ranks_per_node=2 \
  --checkpoint.dir= --log.dir="$run/hybrid_zero2"

echo "== 3. islands: the outer parameters of one rank"
expect=("at step 4: unit embedding" "ranks 1, 3 \(hosts [^)]*\) hold 2 replicas of it with different outer parameters")
caught "flip=outer:update=1@1" --parallel.sharding=full_shard --topology.ranks_per_node=2 --parallel.islands=2 \
  --outer.inner_steps=2 --checkpoint.dir= --log.dir="$run/islands"

echo "== 4. the state a run starts from"
expect=("at step 0: unit embedding" "the master weights of rank 1 \(host [^)]*\) differ from those of ranks 0, 2, 3"
        "there is no earlier checkpoint")
caught "flip=params:update=0@1" --parallel.sharding=no_shard --checkpoint.dir= --log.dir="$run/start"
expect=("at step 4: unit embedding \(bytes 0 to"
        "the full compute parameters of rank 1 \(host [^)]*\) differ from those of ranks 0, 2, 3")
caught "flip=full:update=4@1" --parallel.sharding=zero1 --checkpoint.dir= --log.dir="$run/zero1"

echo "== 5. full_shard holds nothing twice; check.replicas_every=0 is off"
out=$(launch "${common[@]}" --parallel.sharding=full_shard --checkpoint.dir= --log.dir="$run/full" 2>&1)
grep -q "this job holds no state twice (full_shard), so it compares nothing" <<<"$out" || fail "full_shard: $out"
out=$(HSDP_FAULT=flip=params:update=1@2 launch "${common[@]}" --parallel.sharding=no_shard --check.replicas_every=0 \
  --checkpoint.dir= --log.dir="$run/off" 2>&1) || fail "check.replicas_every=0 still checked: $out"
grep -q "replica check" <<<"$out" && fail "check.replicas_every=0 still announced a check: $out"
python3 - "$run/full/summary.json" "$run/off/summary.json" <<'PY'
import json, sys
full, off = (json.load(open(p)) for p in sys.argv[1:])
assert full["replicas_every"] == 4 and full["replica_checks"] == 4, full  # before step 1, steps 4, 8, 12
assert off["replica_checks"] == 0, off
PY
echo "PASS"
