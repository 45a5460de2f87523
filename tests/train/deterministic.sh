#!/usr/bin/env bash
# Two runs with the same seeds must log bit-identical losses and gradient norms at every step.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
for i in 1 2; do
  rm -rf "$run$i"
  "$train" --config "$deck" --checkpoint.dir= --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json" \
    --train.micro_batch=8 --train.steps=30 --train.eval_every=10 --log.dir="$run$i" --log.every=100 >/dev/null
done
python3 - "$run"1/metrics.jsonl "$run"2/metrics.jsonl <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 30, (len(a), len(b))
for x, y in zip(a, b):
    for key in ("loss", "grad_norm", "lr", "val_loss"):
        if x.get(key) != y.get(key):
            sys.exit(f"step {x['step']}: {key} differs: {x.get(key)!r} vs {y.get(key)!r}")
print("30 steps: loss, grad_norm, lr and val_loss identical in both runs")
PY
