#!/usr/bin/env bash
# Fixture of the sample tests: the quickstart model trained for 40 steps on one rank, with its vocabulary of 64
# padded to 128 rows (so exports must cut the padding and imports restore it): OUT/one_rank/step_40.h5.
#   make_model.sh HSDP_TRAIN DECK DATA OUT
set -euo pipefail
train=$1 deck=$2 data=$3 out=$4
rm -rf "$out" && mkdir -p "$out"
"$train" --config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json" \
  --model.padded_vocab_size=128 --parallel.sharding=no_shard --train.steps=40 --train.eval_every=0 --log.every=20 \
  --checkpoint.dir="$out/one_rank" --log.dir="$out/log" >/dev/null
test -f "$out/one_rank/step_40.h5"
echo "trained $out/one_rank/step_40.h5"
