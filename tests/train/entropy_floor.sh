#!/usr/bin/env bash
# Trains the quickstart deck on one rank (micro_batch 8: the global batch of the deck's 4 ranks x 2) and checks the final val loss against the source's entropy rate:
# val_loss <= 1.05 * H (issue 3). The val set is 16 x 8 x 64 = 8192 tokens, so the estimate's own noise is
# about 0.01 nats, well inside the 5% (0.06 nats) margin.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
rm -rf "$run"
"$train" --config "$deck" --checkpoint.dir= --data.train="$data/train.bin" --data.val="$data/val.bin" \
  --data.entropy_json="$data/source.json" --log.dir="$run" --log.every=100 --train.micro_batch=8
python3 - "$run/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
ratio = s["final_val_loss"] / s["entropy_rate"]
print(f"final val loss {s['final_val_loss']:.4f}, entropy rate {s['entropy_rate']:.4f}, ratio {ratio:.4f} (must be <= 1.05)")
sys.exit(0 if ratio <= 1.05 else 1)
PY
