#!/usr/bin/env bash
# hsdp-plan's bandwidth units and --device (issue 26, item 6):
#
#   units_and_device.sh HSDP_PLAN HSDP_TRAIN HSDP_DATA WORK
#
# - --inter-gbps (the old flag, read as gigabits while it meant gigabytes) exits 2 naming what replaces it;
# - --inter-gbyte-s 200 (faster than inside a node) plans, with a warning naming the unit mistake;
# - --inter-gbit-per-node 200 on 8 ranks per node is 200/8/8 = 3.125 GB/s per rank, without a warning;
# - --device cuda plans every strategy, as hsdp-train --device.type=cuda takes every one: no row's keys are refused
#   (without a GPU it may still stop for want of a device), and the printed deck keys select device.type=cuda.
#   (hsdp-train runs on one rank here: an hpZ group of 8 is given as 0, since one rank cannot hold it.)
set -euo pipefail
plan=$1 train=$2 data=$3 work=$4
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
model=(--model gpt2-1.5b --nodes 16 --ranks-per-node 8)

code=0
"$plan" "${model[@]}" --inter-gbps 200 >"$work/old.txt" 2>&1 || code=$?
[[ $code == 2 ]] || fail "--inter-gbps: exit $code"
grep -q "config error: --inter-gbps is gone: .* use --inter-gbyte-s (GB/s per rank) or --inter-gbit-per-node" \
  "$work/old.txt" || fail "--inter-gbps: $(cat "$work/old.txt")"

"$plan" "${model[@]}" --inter-gbyte-s 200 >/dev/null 2>"$work/warn.txt" || fail "--inter-gbyte-s 200 failed"
grep -q "warning: inter-node bandwidth 200 GB/s per rank exceeds intra-node 150 GB/s per rank" "$work/warn.txt" ||
  fail "no warning for 200 GB/s between nodes: $(cat "$work/warn.txt")"

"$plan" "${model[@]}" --inter-gbit-per-node 200 >"$work/gbit.txt" 2>"$work/gbit.err" || fail "--inter-gbit-per-node"
grep -q "inter-node 3.12 GB/s" "$work/gbit.txt" || fail "200 Gbit/s per node of 8 ranks: $(grep cluster "$work/gbit.txt")"
[[ ! -s $work/gbit.err ]] || fail "a warning for a plausible network: $(cat "$work/gbit.err")"

"$plan" "${model[@]}" --inter-gbit-per-node 200 --device cuda >"$work/cuda.txt" 2>/dev/null
grep -Eq "^deck keys: --parallel.sharding=[a-z_0-9]+ .*--device.type=cuda --precision.param=bf16 --precision.reduce=fp32" \
  "$work/cuda.txt" || fail "--device cuda: $(grep '^deck keys' "$work/cuda.txt")"
"$plan" "${model[@]}" --inter-gbit-per-node 200 --device cuda --json >"$work/cuda.jsonl" 2>/dev/null

"$data" synth --out-dir "$work/data" >/dev/null
rows=0
while read -r sharding qwz hpz qgz name; do
  args=(--data.train="$work/data/train.bin" --data.val="$work/data/val.bin" --train.steps=1 --checkpoint.dir=
        --log.dir="$work/log" --device.type=cuda --precision.param=bf16 --precision.reduce=fp32
        --parallel.sharding="$sharding" --zeropp.quantized_weights="$qwz" --zeropp.hpz_partition_size="$((hpz > 1 ? 0 : hpz))"
        --zeropp.quantized_gradients="$qgz")
  code=0
  "$train" "${args[@]}" >"$work/train.txt" 2>&1 || code=$?
  # Without a GPU here it may still stop for want of a device, but not for a key hsdp-plan chose.
  ! grep -Eq "config error: .*(parallel|precision|zeropp|activation_checkpointing)" "$work/train.txt" ||
    fail "$name: hsdp-plan plans it on GPUs, hsdp-train refuses: $(cat "$work/train.txt")"
  echo "$name: hsdp-train --device.type=cuda exit $code"
  rows=$((rows + 1))
done < <(python3 -c '
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(r["sharding"], str(r["qwZ"]).lower(), r["hpZ"], str(r["qgZ"]).lower(), r["strategy"])
' "$work/cuda.jsonl")
[[ $rows == 8 ]] || fail "$rows rows"
echo "PASS"
