#!/usr/bin/env bash
# Which strategies reduce gradients in the same order (docs/architecture.md, "One reduction order?"), pinned bit for
# bit on 4 ranks (6 steps; the /model checksums of the last checkpoint): full_shard on one node, hybrid_shard on one
# node (its node is the world) and full_shard on 2 emulated nodes (the same node-major ring of 4) hold the same bits;
# no_shard and hybrid_shard on 2 nodes (each a reduce-scatter inside the node, an all-reduce across, in pairs) hold
# the same bits. no_shard on one node (its buckets' all-reduce) is in neither set: the doc says why.
set -euo pipefail
train=$1 ckpt=$2 deck=$3 data=$4 run=$5 mpiexec=$6
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$run"
mkdir -p "$run"
fail() { echo "FAIL: $*" >&2; exit 1; }
model_sums() {  # strategy ranks_per_node: the checksums of /model after 6 steps
  local dir=$run/$1_$2
  "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$train" --config "$deck" --data.train="$data/train.bin" \
    --data.val="$data/val.bin" --data.entropy_json= --train.steps=6 --train.eval_every=0 --device.threads=1 \
    --parallel.sharding="$1" --topology.ranks_per_node="$2" --checkpoint.dir="$dir" --log.dir="$dir.log" >/dev/null
  "$ckpt" inspect "$dir/step_6.h5" | awk '/^\/model\// { g = 1; next } /^\// { g = 0 } g && /checksum/'
}
ring=$(model_sums full_shard 4)
[ -n "$ring" ] || fail "no /model checksums"
[ "$(model_sums hybrid_shard 4)" = "$ring" ] || fail "hybrid_shard on one node differs from full_shard"
[ "$(model_sums full_shard 2)" = "$ring" ] || fail "full_shard on 2 nodes differs from full_shard on one"
pairs=$(model_sums no_shard 2)
[ "$(model_sums hybrid_shard 2)" = "$pairs" ] || fail "hybrid_shard on 2 nodes differs from no_shard on 2"
echo "PASS: full_shard (1 and 2 nodes) = hybrid_shard (1 node); no_shard (2 nodes) = hybrid_shard (2 nodes), bit for bit"
