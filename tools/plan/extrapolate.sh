#!/usr/bin/env bash
# Extrapolation from the time model that held on the capped links (issue 24, item 4): hsdp-plan for GPT-2 XL and a 7B
# Llama on 16 to 1024 nodes of 8 GPUs at 100, 200, 400 and 800 Gbit/s per node; every strategy's predicted step and
# its speed-up over full_shard (ZeRO-3), as a Markdown table on stdout (docs/extrapolation.md is its output).
#   tools/plan/extrapolate.sh [HSDP_PLAN]          (HSDP_EXTRAPOLATE_NODES="16 64" for fewer node counts; the
#                                                  whole table takes about 10 s here)
# GPU nodes as hsdp-plan's defaults describe them: 80 GiB and 400 TFLOP/s per GPU, 150 GB/s per GPU inside a node
# (NVLink's bus bandwidth), 5/10 us latency; bf16 parameters and reduction, micro-batch 1 of 1024 (GPT-2 XL) or
# 2048 (Llama) tokens per GPU. A row that does not fit is planned with activation checkpointing (its time includes
# the recomputation) or marked.
set -euo pipefail
plan=${1:-$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../../build/bin/hsdp-plan}
echo "| model | nodes x 8 | Gbit/s per node | full_shard step | speed-up over full_shard: no_shard, zero1, shard_grad_op, hybrid_shard, hybrid_shard_zero2, full_shard+qwZ+hpZ+qgZ, hybrid_shard+qgZ | recommended |"
echo "|---|---|---|---|---|---|"
for model in gpt2-1.5b llama-7b; do
  seq=2048
  [[ $model == gpt2-1.5b ]] && seq=1024
  for nodes in ${HSDP_EXTRAPOLATE_NODES:-16 64 256 1024}; do
    for gbit in 100 200 400 800; do
      "$plan" --model "$model" --nodes "$nodes" --ranks-per-node 8 --inter-gbit-per-node "$gbit" --micro-batch 1 \
        --seq-len "$seq" --param-dtype bf16 --reduce-dtype bf16 --json 2>/dev/null |
        python3 -c '
import json, sys
model, nodes, gbit = sys.argv[1:4]
rows = {r["strategy"]: r for r in map(json.loads, sys.stdin)}
full = rows["full_shard"]["step_ms"]
def cell(name):
    r = rows[name]
    mark = "" if r["fits"] == "yes" else (" c" if r["fits"] == "with_checkpointing" else " (no fit)")
    speedup = full / r["step_ms"]
    return f"{speedup:.2f}{mark}"
names = ["no_shard", "zero1", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2", "full_shard+qwZ+hpZ+qgZ",
         "hybrid_shard+qgZ"]
pick = next(n for n, r in rows.items() if r.get("recommended"))
print(f"| {model} | {nodes} | {gbit} | {full:.0f} ms | " + ", ".join(cell(n) for n in names) + f" | {pick} |")
' "$model" "$nodes" "$gbit"
    done
  done
done
