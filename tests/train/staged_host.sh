#!/usr/bin/env bash
# comm.stage=host (every collective of the engine's groups staged through host buffers, memcpy on the CPU: the GPU's
# staged MPI path) trains bit for bit as direct MPI does: hybrid_shard with qgZ (its all-to-alls and cross-node
# all-reduces) and hierarchical no_shard on 2x2, 12 steps with an evaluation; losses, norms and the val loss equal.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
shift 4
mpiexec=("$@")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$run"
mkdir -p "$run"
common=(--config "$deck" --checkpoint.dir= --data.train="$data/train.bin" --data.val="$data/val.bin"
        --data.entropy_json="$data/source.json" --train.micro_batch=2 --train.steps=12 --train.eval_every=6
        --train.eval_tokens=4096 --log.every=100 --topology.ranks_per_node=2)
for case in "hybrid_shard --zeropp.quantized_gradients=true" "no_shard"; do
  read -r -a strategy <<<"$case"
  name=${strategy[0]}
  for stage in direct host; do
    "${mpiexec[@]}" "$train" "${common[@]}" --parallel.sharding="${strategy[@]}" --comm.stage=$stage \
      --log.dir="$run/$name-$stage" >"$run/$name-$stage.log" 2>&1 || { cat "$run/$name-$stage.log"; exit 1; }
  done
  python3 - "$run/$name-direct/metrics.jsonl" "$run/$name-host/metrics.jsonl" "$name" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 12, (len(a), len(b))
for x, y in zip(a, b):
    for key in ("loss", "grad_norm", "val_loss"):
        if x.get(key) != y.get(key):
            sys.exit(f"{sys.argv[3]} step {x['step']}: {key} differs: direct {x.get(key)!r}, staged {y.get(key)!r}")
print(f"{sys.argv[3]}: 12 steps, loss, grad_norm and val_loss identical staged through host and direct")
PY
done
