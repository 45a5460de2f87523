#!/usr/bin/env bash
# bf16 parameters (all-gathered and computed in bf16 precision) with fp32 reduction, 200 steps of the quickstart
# on 4 ranks as 2x2 hybrid_shard: the final training loss must be within 2% of the fp32 run's (issue 4).
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
shift 4
mpirun=("$@")
for p in fp32 bf16; do
  rm -rf "$run-$p"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" "$train" --config "$deck" --checkpoint.dir= \
    --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json" \
    --train.steps=200 --train.eval_every=200 --precision.param=$p --precision.reduce=fp32 \
    --topology.ranks_per_node=2 --log.dir="$run-$p" --log.every=100 >/dev/null
done
python3 - "$run-fp32/summary.json" "$run-bf16/summary.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for key in ("final_loss", "final_val_loss"):
    rel = abs(b[key] - a[key]) / a[key]
    print(f"{key}: fp32 {a[key]:.4f}  bf16 {b[key]:.4f}  relative difference {rel:.4f} (must be <= 0.02)")
    if rel > 0.02:
        sys.exit(1)
PY
