#!/usr/bin/env bash
# "Any world size": a checkpoint written by 4 ranks (hybrid_shard on 2 emulated nodes of 2) samples the same tokens
# as its consolidated one-rank copy.
#   world_size_test.sh HSDP_TRAIN HSDP_CKPT HSDP_SAMPLE DECK DATA WORK MPIEXEC...
set -euo pipefail
train=$1 ckpt=$2 sample=$3 deck=$4 data=$5 work=$6
shift 6
rm -rf "$work" && mkdir -p "$work"
"$@" "$train" --config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" \
  --data.entropy_json="$data/source.json" --parallel.sharding=hybrid_shard --topology.ranks_per_node=2 \
  --train.steps=10 --train.eval_every=0 --log.every=10 --checkpoint.dir="$work/four" --log.dir="$work/log" >/dev/null
"$ckpt" inspect "$work/four/step_10.h5" --summary | grep "saved by 4 rank(s) on 2 node(s)"
"$ckpt" consolidate "$work/four/step_10.h5" --output "$work/one.h5" >/dev/null
four=$("$sample" "$work/four" --prompt-ids 1,2,3 --max-new-tokens 32 --output ids --seed 3)
one=$("$sample" "$work/one.h5" --prompt-ids 1,2,3 --max-new-tokens 32 --output ids --seed 3)
echo "saved by 4 ranks: $four"
echo "consolidated:     $one"
[[ $four == "$one" ]] || { echo "FAIL: the tokens differ"; exit 1; }
echo "OK"
