#!/usr/bin/env bash
# Resharding (issue 6): a checkpoint saved at step 10 by 4 ranks (full_shard, 1 node x 4) is resumed on 2 ranks
# (hybrid_shard, 2 nodes x 1), 1 rank (no_shard) and 3 ranks (full_shard); the next 10 steps must match the
# uninterrupted 4-rank run within the fp32 tolerance of the sharding tests: losses within 1e-5 relative and
# max|dparam| / max|param| < 1e-5. The global batch is 12 sequences on every world size (micro_batch 12 / ranks).
set -euo pipefail
train=$1 ckpt_tool=$2 deck=$3 data=$4 run=$5
shift 5
mpiexec=$1   # the mpirun binary; the world size varies here
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
launch() { local np=$1; shift; "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$train" "$@" >/dev/null; }
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.steps=20 --train.eval_every=0 --log.every=100)
rm -rf "$run"
launch 4 "${common[@]}" --train.micro_batch=3 --parallel.sharding=full_shard --topology.ranks_per_node=4 \
  --checkpoint.dir="$run/straight" --log.dir="$run/log_straight"
launch 4 "${common[@]}" --train.micro_batch=3 --parallel.sharding=full_shard --topology.ranks_per_node=4 \
  --checkpoint.dir="$run/saved" --log.dir="$run/log_saved" --train.stop_at_step=10
"$ckpt_tool" export "$run/straight/step_20.h5" --format safetensors --output "$run/straight.safetensors" >/dev/null
for target in "2 6 hybrid_shard 1" "1 12 no_shard 1" "3 4 full_shard 3"; do
  read -r np micro strategy rpn <<<"$target"
  name=np$np
  launch "$np" "${common[@]}" --train.micro_batch="$micro" --parallel.sharding="$strategy" --topology.ranks_per_node="$rpn" \
    --checkpoint.dir="$run/$name" --checkpoint.resume="$run/saved/step_10.h5" --log.dir="$run/log_$name"
  "$ckpt_tool" export "$run/$name/step_20.h5" --format safetensors --output "$run/$name.safetensors" >/dev/null
  python3 - "$run/log_straight/metrics.jsonl" "$run/log_$name/metrics.jsonl" "$run/straight.safetensors" \
    "$run/$name.safetensors" "$np ranks ($strategy)" <<'PY'
import json, struct, sys
from array import array

def tensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        values = array("f")
        values.frombytes(raw[8 + n + a:8 + n + b])
        out[name] = values
    return out

straight = {json.loads(l)["step"]: json.loads(l) for l in open(sys.argv[1])}
resumed = [json.loads(l) for l in open(sys.argv[2])]
worst_loss = max(abs(r["loss"] - straight[r["step"]]["loss"]) / straight[r["step"]]["loss"] for r in resumed if r["step"] > 10)
a, b = tensors(sys.argv[3]), tensors(sys.argv[4])
scale = max(max(abs(x) for x in t) for t in a.values())
worst_param = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a) / scale
print(f"{sys.argv[5]}: steps 11-20 max relative loss difference {worst_loss:.2e}, max|dparam|/max|param| {worst_param:.2e}")
sys.exit(0 if worst_loss < 1e-5 and worst_param < 1e-5 and len([r for r in resumed if r["step"] > 10]) == 10 else 1)
PY
done
