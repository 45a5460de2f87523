#!/usr/bin/env bash
# hsdp-bench-train-gpu drives the sharding engine (what hsdp-train runs), checked without a GPU on its CPU form:
#   bench_engine_cpu_test.sh BENCH MPIRUN...
# A tiny GPT on 2 CPU ranks: its parameter count is the GPT-2 formula's; no_shard, full_shard and hybrid_shard
# (the same global batch, the same seeds) end at the same loss (the strategies' equality, as in the engine's suites);
# the loss after 5 steps on the same batch is below the loss after 1 (AdamW steps are applied); a --set key that
# does not exist ends with exit 2 naming it.
set -euo pipefail
bench=$1
shift
shape=(--device cpu --n_layer 2 --n_embd 64 --n_head 4 --vocab_size 256 --padded_vocab_size 256 --batch 2
       --seq_len 32 --json)
line() { "$@" "$bench" "${shape[@]}" "${extra[@]}" | tail -n 1; }
declare -A loss
for s in no_shard full_shard hybrid_shard; do
  extra=(--sharding "$s" --warmup 1 --steps 4)
  out=$(line "$@" -np 2)
  echo "$out"
  loss[$s]=$(python3 -c '
import json, sys
d = json.loads(sys.argv[1])
C, L, Vp, block = 64, 2, 256, 1024  # --block_size keeps its default, above --seq_len
params = Vp * C + block * C + L * (12 * C * C + 13 * C) + 2 * C
assert d["path"] == "engine" and d["ranks"] == 2 and d["steps"] == 4, d
assert d["params"] == params, (d["params"], params)
assert d["tokens_per_s"] > 0 and d["step_ms"] > 0, d
print(repr(d["loss"]))' "$out")
done
extra=(--warmup 0 --steps 1)
first=$(line "$@" -np 2 | python3 -c 'import json, sys; print(repr(json.loads(sys.stdin.read())["loss"]))')
python3 - "${loss[no_shard]}" "${loss[full_shard]}" "${loss[hybrid_shard]}" "$first" <<'PY'
import sys
no_shard, full_shard, hybrid, first = map(float, sys.argv[1:])
for name, x in (("full_shard", full_shard), ("hybrid_shard", hybrid)):
    assert abs(x - no_shard) <= 1e-6 * abs(no_shard), (name, x, no_shard)
assert no_shard < first, (no_shard, first)
print(f"strategies agree: loss {no_shard:.6f} after 5 steps (step 1: {first:.6f})")
PY
extra=(--set no.such_key=1)
code=0
msg=$("$bench" "${shape[@]}" "${extra[@]}" 2>&1) || code=$?
[[ $code == 2 && $msg == *"unknown option 'no.such_key'"* ]] || { echo "FAIL: exit $code: $msg"; exit 1; }
echo PASS
