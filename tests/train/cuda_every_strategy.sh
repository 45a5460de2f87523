#!/usr/bin/env bash
# device.type=cuda takes every strategy, ZeRO++, fp16, activation checkpointing and log.trace: without a GPU (or a CUDA build)
# hsdp-train stops at the device, exit 2 naming it and no deck key; with one it trains the step.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
rm -rf "$run"
mkdir -p "$run"
common=(--config "$deck" --checkpoint.dir= --data.train="$data/train.bin" --data.val="$data/val.bin"
        --data.entropy_json="$data/source.json" --train.steps=1 --train.eval_every=0 --device.type=cuda
        --comm.intra=mpi)
cases=("--parallel.sharding=full_shard --precision.param=bf16 --zeropp.quantized_weights=true --zeropp.quantized_gradients=true"
       "--parallel.sharding=zero1 --precision.param=fp16"
       "--parallel.sharding=shard_grad_op --train.activation_checkpointing=true --log.trace=true"
       "--parallel.sharding=hybrid_shard --precision.param=bf16 --precision.reduce=bf16")
i=0
for c in "${cases[@]}"; do
  read -r -a extra <<<"$c"
  set +e
  out=$("$train" "${common[@]}" "${extra[@]}" --log.dir="$run/$i" 2>&1)
  code=$?
  set -e
  if [[ $code -eq 0 ]]; then
    echo "$c: trained on a GPU"
  elif [[ $code -eq 2 ]] && grep -Eq "no CUDA device is visible|built without" <<<"$out" &&
       ! grep -Eq "parallel\.sharding|zeropp|precision|activation_checkpointing|log\.trace" <<<"$out"; then
    echo "$c: accepted; stops at the device: $(tail -n 1 <<<"$out")"
  else
    echo "$c: exit $code: $out"
    exit 1
  fi
  i=$((i + 1))
done
