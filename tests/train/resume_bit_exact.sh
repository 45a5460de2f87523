#!/usr/bin/env bash
# Bit-exact resume (issue 6) with evaluations on both sides of it: hybrid_shard and full_shard+ZeRO++ (bf16) on 4
# ranks as 2x2, 10 steps + checkpoint + resume + 10 steps, evaluating every 5, must equal 20 uninterrupted steps bit
# for bit: every metrics line (loss, grad_norm, lr, val_loss) and every dataset of the final checkpoint (/model,
# /optim). Every strategy's resume on the same 2x2 mesh, bit for bit with the same comparisons but no evaluation, is
# hsdp-selfcheck's resume column (selfcheck_cpu_pass for GPT-2, selfcheck_cpu_llama for a Llama).
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
shift 4
mpirun=("$@")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.steps=20 --train.eval_every=5 --log.every=100 --topology.ranks_per_node=2 --checkpoint.every=0)
configs=("hybrid_shard"
         "full_shard --precision.param=bf16 --zeropp.quantized_weights=true --zeropp.hpz_partition_size=2 --zeropp.quantized_gradients=true")
for config in "${configs[@]}"; do
  read -r strategy extra <<<"$config"
  name=$strategy${extra:+_zeropp}
  dir=$run/$name
  rm -rf "$dir"
  # shellcheck disable=SC2086
  "${mpirun[@]}" "$train" "${common[@]}" --parallel.sharding="$strategy" $extra \
    --checkpoint.dir="$dir/straight" --log.dir="$dir/log_straight" >/dev/null
  # shellcheck disable=SC2086
  "${mpirun[@]}" "$train" "${common[@]}" --parallel.sharding="$strategy" $extra \
    --checkpoint.dir="$dir/resumed" --log.dir="$dir/log_resumed" --train.stop_at_step=10 >/dev/null
  # shellcheck disable=SC2086
  "${mpirun[@]}" "$train" "${common[@]}" --parallel.sharding="$strategy" $extra \
    --checkpoint.dir="$dir/resumed" --log.dir="$dir/log_resumed" --checkpoint.resume=auto >"$dir/resume.log"
  grep -q "resumed from $dir/resumed/step_10.h5" "$dir/resume.log" || { echo "$name: did not resume"; exit 1; }
  h5diff -q "$dir/straight/step_20.h5" "$dir/resumed/step_20.h5" /model || { echo "$name: /model differs"; exit 1; }
  h5diff -q "$dir/straight/step_20.h5" "$dir/resumed/step_20.h5" /optim || { echo "$name: /optim differs"; exit 1; }
  python3 - "$dir/log_straight/metrics.jsonl" "$dir/log_resumed/metrics.jsonl" "$name" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 20, (len(a), len(b))
for x, y in zip(a, b):
    for key in ("step", "loss", "grad_norm", "lr", "val_loss", "tokens"):
        if x.get(key) != y.get(key):
            sys.exit(f"{sys.argv[3]} step {x['step']}: {key} {x.get(key)!r} != {y.get(key)!r}")
print(f"{sys.argv[3]}: 20 metrics lines and the final /model and /optim identical after resuming at step 10")
PY
done
