#!/usr/bin/env bash
# hsdp-train against its own benchmark, side by side in one run, on one rank: GPT-2 124M shapes (the deck's
# defaults), micro_batch 4, seq_len 64, 2 threads. First hsdp-bench-train-cpu (forward, backward and an AdamW-like
# update of the same model, plus the OpenBLAS SGEMM rate on the LM head's shape), then hsdp-train on synthetic data
# (engine, AdamW, gradient norm and clipping, metrics: the whole trainer). Prints one JSON line:
#   ratio             hsdp-train tokens/s over the benchmark's (issue target: >= 0.97)
#   ratio_to_sgemm    hsdp-train's achieved GFLOP/s (the benchmark's FLOP count per step) over the median SGEMM rate
# Both exclude their first (warm-up) step. Takes a few minutes on an idle 2-core node; a busy node skews it.
#   tools/bench/trainer_cpu.sh                 default: 6 timed steps each
# Environment: HSDP_BUILD_DIR (default build), HSDP_JOBS (default: all cores), HSDP_BENCH_THREADS (2),
#              HSDP_BENCH_STEPS (6), HSDP_BASELINE_BUILD_DIR (unset): also run that build's hsdp-train (e.g. the
#              previous commit's), in the order baseline, this build, this build, baseline, and add
#              baseline_tokens_per_s and ratio_vs_baseline (this build's mean tokens/s over the baseline's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}
jobs=${HSDP_JOBS:-$(nproc)}
threads=${HSDP_BENCH_THREADS:-2}
steps=${HSDP_BENCH_STEPS:-6}

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j "$jobs" --target hsdp-train hsdp-bench-train-cpu hsdp-data >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$build/bin/hsdp-data" synth --out-dir "$work/data" >/dev/null

bench=$("$build/bin/hsdp-bench-train-cpu" --threads "$threads" --steps "$steps" --json | tail -n 1)
# hsdp-train picks the OpenBLAS kernels the same way when told to (the benchmark re-executes itself with them).
coretype=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["blas_core"])' "$bench")
train() { # BUILD RUNDIR
  OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$coretype} "$1/bin/hsdp-train" \
    --data.train="$work/data/train.bin" --data.val="$work/data/val.bin" \
    --train.steps=$((steps + 1)) --train.micro_batch=4 --train.seq_len=64 --train.eval_every=0 \
    --device.threads="$threads" --log.dir="$2" --log.every=1000 >"$2.log" 2>&1 ||
    { cat "$2.log" >&2; exit 1; }
}
baseline=${HSDP_BASELINE_BUILD_DIR:-}
if [[ -n $baseline ]]; then
  [[ -x $baseline/bin/hsdp-train ]] || { echo "trainer_cpu.sh: no $baseline/bin/hsdp-train" >&2; exit 2; }
  train "$baseline" "$work/base1"
  train "$build" "$work/run"
  train "$build" "$work/again"
  train "$baseline" "$work/base2"
fi
[[ -n $baseline ]] || train "$build" "$work/run"

python3 - "$bench" "$work/run/summary.json" "${baseline:+$work}" <<'EOF'
import json, sys
bench = json.loads(sys.argv[1])
with open(sys.argv[2]) as f:
    train = json.load(f)
def tokens_per_s(run):
    with open(f"{sys.argv[3]}/{run}/summary.json") as f:
        return json.load(f)["tokens_per_s"]
tokens_per_step = bench["batch"] * bench["seq_len"]
train_gflops = bench["gflop_per_step"] * train["tokens_per_s"] / tokens_per_step
out = {
    "bench": "trainer_cpu",
    "params": bench["params"], "batch": bench["batch"], "seq_len": bench["seq_len"], "threads": bench["threads"],
    "steps": bench["steps"], "blas_core": bench["blas_core"],
    "hsdp_train_tokens_per_s": train["tokens_per_s"],
    "bench_tokens_per_s": bench["tokens_per_s"],
    "ratio": train["tokens_per_s"] / bench["tokens_per_s"],
    "hsdp_train_gflops": train_gflops,
    "bench_gflops": bench["achieved_gflops"],
    "sgemm_gflops_median": bench["sgemm_gflops_median"],
    "ratio_to_sgemm": train_gflops / bench["sgemm_gflops_median"],
    "bench_ratio_to_sgemm": bench["ratio_mean"],
    "load_average_before": bench["load_average_before"],
}
if sys.argv[3]:
    now = (tokens_per_s("run") + tokens_per_s("again")) / 2
    before = (tokens_per_s("base1") + tokens_per_s("base2")) / 2
    out.update(tokens_per_s_mean_of_2=now, baseline_tokens_per_s=before, ratio_vs_baseline=now / before)
    print("vs baseline: %.1f tokens/s now, %.1f before: ratio %.3f" % (now, before, now / before))
print("hsdp-train %.1f tokens/s, hsdp-bench-train-cpu %.1f tokens/s: ratio %.3f; hsdp-train %.1f GFLOP/s = %.3f of "
      "SGEMM (%.1f GFLOP/s median)" % (out["hsdp_train_tokens_per_s"], out["bench_tokens_per_s"], out["ratio"],
                                      train_gflops, out["ratio_to_sgemm"], out["sgemm_gflops_median"]))
print(json.dumps(out))
EOF
