#!/usr/bin/env bash
# The replica check's cost (check.replicas_every, issue 36): hsdp-train with a check after every step, on 4 ranks
# of no_shard (every rank holds the whole model: the most a check reads), for the quickstart deck and for GPT-2 124M
# shapes (the quickstart data; seq_len 128 and micro_batch 1, so a step is short and the ratio conservative). From
# the same run: a check's mean time (summary.json: replica_check_ms / replica_checks) against the median step time
# (metrics.jsonl, steps 2..N), and so the cost at the default interval (the deck's check.replicas_every, 100):
# check_ms / (interval x step_ms). One JSON line per model:
#
#   {"bench":"replica_check","model":"quickstart","params":...,"ranks":4,"strategy":"no_shard","steps":...,
#    "check_ms":...,"step_ms":...,"interval":100,"cost_at_interval":check_ms/(interval*step_ms),"cost_every_step":...}
#
#   tools/bench/replica_check.sh [--steps 12] [--models quickstart,gpt2_124m] [--out DIR] [--build build]
#
# Every run writes under DIR (default runs/replica_check_<date>_<pid>, fresh), results in DIR/replica_check.jsonl.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${HSDP_BUILD_DIR:-$root/build}
steps=12
models=quickstart,gpt2_124m
out=$root/runs/replica_check_$(date +%Y%m%d_%H%M%S)_$$
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    -h | --help) ;;
    --*) (($# >= 2)) || { echo "replica_check.sh: $1 needs a value (--help lists the options)" >&2; exit 2; } ;;
  esac
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$(readlink -f "$2"); shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "replica_check.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
if ! [[ $steps =~ ^[0-9]+$ ]] || ((steps < 3)); then echo "replica_check.sh: --steps must be at least 3" >&2; exit 2; fi
[[ -e $out ]] && { echo "replica_check.sh: $out exists: give a fresh --out" >&2; exit 2; }
[[ -x $build/bin/hsdp-train ]] || { echo "replica_check.sh: no $build/bin/hsdp-train: build first (tools/test.sh)" >&2; exit 2; }
mkdir -p "$out"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
launcher=(mpirun --oversubscribe -np 4)
[[ $(id -u) -eq 0 ]] && launcher=(mpirun --oversubscribe --allow-run-as-root -np 4)
data=$out/data
"$build/bin/hsdp-data" synth --out-dir "$data" >/dev/null
interval=$("$build/bin/hsdp-train" --help | awk '/^  --check.replicas_every/ { gsub(/[][]/, "", $2); print $2 }')
for model in ${models//,/ }; do
  case $model in
    quickstart) keys=() ;;
    gpt2_124m) keys=(--model.n_layer=12 --model.n_head=12 --model.n_embd=768 --model.vocab_size=50257
                     --model.padded_vocab_size=50304 --model.block_size=1024 --train.seq_len=128
                     --train.micro_batch=1) ;;
    *) echo "replica_check.sh: unknown model '$model' (quickstart, gpt2_124m)" >&2; exit 2 ;;
  esac
  "${launcher[@]}" "$build/bin/hsdp-train" --config "$root/input/quickstart.ini" --data.train="$data/train.bin" \
    --data.val="$data/val.bin" --data.entropy_json="$data/source.json" --parallel.sharding=no_shard \
    --device.threads=1 --train.steps="$steps" --train.eval_every=0 --log.every=1000 --checkpoint.dir= \
    --check.replicas_every=1 "${keys[@]}" --log.dir="$out/$model" >"$out/$model.out" 2>&1 ||
    { cat "$out/$model.out" >&2; echo "replica_check.sh: the $model run failed" >&2; exit 1; }
  python3 - "$model" "$out/$model" "$interval" <<'PY' | tee -a "$out/replica_check.jsonl"
import json, statistics, sys
model, run, interval = sys.argv[1], sys.argv[2], int(sys.argv[3])
summary = json.load(open(f"{run}/summary.json"))
steps = [json.loads(l) for l in open(f"{run}/metrics.jsonl")][1:]  # step 1 warms up
check_ms = summary["replica_check_ms"] / summary["replica_checks"]
step_ms = statistics.median(m["step_ms"] for m in steps)
print(json.dumps({"bench": "replica_check", "model": model, "params": summary["params"], "ranks": 4,
                  "strategy": summary["strategy"], "steps": summary["steps"], "checks": summary["replica_checks"],
                  "check_ms": round(check_ms, 3), "step_ms": round(step_ms, 2), "interval": interval,
                  "cost_at_interval": round(check_ms / (interval * step_ms), 6),
                  "cost_every_step": round(check_ms / step_ms, 4)}))
PY
done
echo "replica_check.sh: results in $out/replica_check.jsonl"
