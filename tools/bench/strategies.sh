#!/usr/bin/env bash
# Every sharding strategy on one model, 4 ranks as 2 emulated nodes x 2, measured side by side in one run:
# step time relative to no_shard, exposed (not hidden) communication, model-state memory per rank, bytes per link.
# Prints a Markdown table and one JSON line per strategy.
#   tools/bench/strategies.sh [--steps N] [--deck input/quickstart.ini] [--baseline BUILD_DIR] [extra overrides...]
# --baseline BUILD_DIR: also runs every strategy with BUILD_DIR's hsdp-train (e.g. a build of the previous commit),
# in the order baseline, this build, this build, baseline, and adds baseline_step_ms and ratio_vs_baseline (this
# build's step time over the baseline's, the mean of the two runs each) to each line.
# The model: the quickstart deck widened to C=256 (8 heads, 3.4M parameters, micro-batch 4 per rank), so that a
# step's compute is large next to the per-collective synchronisation of 4 ranks sharing 2 cores.
# No checkpoints (each run trains from scratch, none resumes another's). Step times are the median over the steps
# after the first 5. Memory is rank 0's; bytes per step are every rank's together (metrics.jsonl's bytes_intra and
# bytes_inter: job-wide, hsdp-plan's figure). The run's logs stay in the folder it names at the end.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
steps=40
deck=input/quickstart.ini
baseline=
extra=(--model.n_embd=256 --model.n_head=8 --train.micro_batch=4)
while (($#)); do
  case $1 in
    --steps | --deck | --baseline)
      (($# >= 2)) || { echo "strategies.sh: $1 needs a value" >&2; exit 2; }
      case $1 in --steps) steps=$2 ;; --deck) deck=$2 ;; --baseline) baseline=$2 ;; esac
      shift 2
      ;;
    *) extra+=("$1"); shift ;;
  esac
done
# The medians leave out the first 5 steps.
if ! [[ $steps =~ ^[0-9]+$ ]] || ((steps <= 5)); then
  echo "strategies.sh: --steps must be a whole number above 5, not '$steps'" >&2
  exit 2
fi
[[ -r $deck ]] || { echo "strategies.sh: cannot read --deck '$deck'" >&2; exit 2; }
build=${HSDP_BUILD_DIR:-build}
[[ -x $build/bin/hsdp-train ]] || { tools/setup.sh && cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$build" -j "$(nproc)"; }
[[ -f data/quickstart/train.bin ]] || "$build/bin/hsdp-data" synth --out-dir data/quickstart >/dev/null
mpirun=(mpirun --oversubscribe -np 4)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)
out=$(mktemp -d /tmp/hsdp-strategies.XXXXXX)
strategies=(no_shard zero1 shard_grad_op full_shard hybrid_shard hybrid_shard_zero2)
run() { # BUILD STRATEGY LOGDIR
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" "$1/bin/hsdp-train" --config "$deck" \
    --train.steps="$steps" --train.eval_every=0 --topology.ranks_per_node=2 --parallel.sharding="$2" \
    --log.dir="$3" --log.every=1000000 --checkpoint.dir= "${extra[@]}" >"$3.log" 2>&1 || { cat "$3.log"; exit 1; }
}
for s in "${strategies[@]}"; do
  if [[ -n $baseline ]]; then
    [[ -x $baseline/bin/hsdp-train ]] || { echo "strategies.sh: no $baseline/bin/hsdp-train" >&2; exit 2; }
    run "$baseline" "$s" "$out/base1_$s"
    run "$build" "$s" "$out/$s"
    run "$build" "$s" "$out/again_$s"
    run "$baseline" "$s" "$out/base2_$s"
  else
    run "$build" "$s" "$out/$s"
  fi
done
python3 - "$out" "${baseline:+with-baseline}" "${strategies[@]}" <<'PY'
import json, statistics, sys
out, with_baseline, strategies = sys.argv[1], sys.argv[2] == "with-baseline", sys.argv[3:]
def step_ms(run):
    return statistics.median(json.loads(l)["step_ms"] for l in list(open(f"{out}/{run}/metrics.jsonl"))[5:])
rows = []
for s in strategies:
    m = [json.loads(l) for l in open(f"{out}/{s}/metrics.jsonl")][5:]
    mem = m[-1]["memory"]
    extra = {}
    if with_baseline:
        now = (step_ms(s) + step_ms(f"again_{s}")) / 2
        before = (step_ms(f"base1_{s}") + step_ms(f"base2_{s}")) / 2
        extra = dict(step_ms_mean_of_2=now, baseline_step_ms=before, ratio_vs_baseline=now / before)
    rows.append(dict(strategy=s, **extra, step_ms=statistics.median(x["step_ms"] for x in m),
                     exposed_comm_ms=statistics.median(x["exposed_comm_ms"] for x in m),
                     comm_ms=statistics.median(x["comm_ms"] for x in m),
                     model_state_bytes=mem["params"] + mem["grads"] + mem["optimizer"],
                     peak_bytes=mem["peak_total"], bytes_intra=m[-1]["bytes_intra"], bytes_inter=m[-1]["bytes_inter"]))
base = rows[0]["step_ms"]
print("| strategy | step ms | vs no_shard | exposed comm ms | comm ms | model state / rank | peak / rank | intra B/step, all ranks | inter B/step, all ranks |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    r["ratio_vs_no_shard"] = r["step_ms"] / base
    print(f"| {r['strategy']} | {r['step_ms']:.1f} | {r['ratio_vs_no_shard']:.3f} | {r['exposed_comm_ms']:.2f} | {r['comm_ms']:.2f} "
          f"| {r['model_state_bytes']/2**20:.2f} MiB | {r['peak_bytes']/2**20:.2f} MiB | {r['bytes_intra']} | {r['bytes_inter']} |")
for r in rows:
    print(json.dumps({"bench": "strategies", "mesh": "2x2", **r}))
if with_baseline:
    worst = max(rows, key=lambda r: r["ratio_vs_baseline"])
    print(f"vs baseline: worst {worst['strategy']} at {worst['ratio_vs_baseline']:.3f} (step time now / before)")
fs = next(r for r in rows if r["strategy"] == "full_shard")
print(f"target: full_shard / no_shard step time = {fs['ratio_vs_no_shard']:.3f} (<= 1.15)")
PY
echo "strategies.sh: every run's log and metrics.jsonl are in $out"
