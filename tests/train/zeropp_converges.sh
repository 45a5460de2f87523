#!/usr/bin/env bash
# ZeRO++ convergence (issue 5): 300 steps of the quickstart on 4 ranks as 2x2, full_shard with bf16 communication,
# with and without qwZ + hpZ (k=2) + qgZ (int4): the final val loss must be within 2% of full_shard bf16's.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
shift 4
mpirun=("$@")
common=(--config "$deck" --checkpoint.dir= --data.train="$data/train.bin" --data.val="$data/val.bin"
        --data.entropy_json="$data/source.json" --train.steps=300 --train.eval_every=300 --log.every=100
        --topology.ranks_per_node=2 --parallel.sharding=full_shard --precision.param=bf16 --precision.reduce=bf16)
rm -rf "$run-base" "$run-zeropp"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" "$train" "${common[@]}" --log.dir="$run-base" >/dev/null
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" "$train" "${common[@]}" --log.dir="$run-zeropp" \
  --zeropp.quantized_weights=true --zeropp.hpz_partition_size=2 --zeropp.quantized_gradients=true \
  --zeropp.grad_bits=4 >/dev/null
python3 - "$run-base/summary.json" "$run-zeropp/summary.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
rel = (b["final_val_loss"] - a["final_val_loss"]) / a["final_val_loss"]
print(f"val loss after 300 steps: full_shard bf16 {a['final_val_loss']:.4f}, ZeRO++ {b['final_val_loss']:.4f}, "
      f"relative {rel:+.4f} (must be <= +0.02); entropy rate {a['entropy_rate']:.4f}")
sys.exit(0 if rel <= 0.02 else 1)
PY
