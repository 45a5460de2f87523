#!/usr/bin/env bash
# Throughput against inter-node bandwidth (issue 24): two hosts of the test cluster (tools/cluster.sh, network
# namespaces joined by a bridge), 2 ranks each, their links capped with tc's tbf at each rate; at each rate every
# strategy trains a few steps, and hsdp-plan, calibrated on the same links at the same rate (hsdp-commbench across
# the hosts) and on the same compute (hsdp-bench-train-cpu, one copy per rank running at once, as the ranks do),
# predicts the step. One JSON line per point:
#
#   {"bench":"bandwidth","strategy":"full_shard","rate_mbit":30,"measured_step_ms":...,"predicted_step_ms":...,
#    "error":predicted/measured-1,"tokens_per_s":...,"bytes_inter":...,"comm_ms":...,"exposed_comm_ms":...,
#    "plan_recommends":...}   (island points also "outer_exposed_ms": the outer exchange's mean time per step)
#
#   tools/bench/bandwidth.sh [--rates 0,300,100,30] [--strategies LIST] [--steps 8] [--micro-batch 8]
#                            [--calibration-iters 32,8] [--tcp-eager BYTES] [--deck input/quickstart.ini]
#                            [--build build] [--work DIR] [--json FILE.jsonl]
#
# --work (default $TMPDIR/hsdp_bandwidth, else /tmp/hsdp_bandwidth): the runs' folder; new, empty or an earlier
# bandwidth.sh's, which it replaces (any other: exit 2, untouched; tools/bench/own_dir.sh).
#
# With --json, also FILE.md (the table: tokens/s, measured and predicted step per point) and FILE.png (tokens/s
# against the rate, one line per strategy; FILE.gp and FILE.dat to restyle it).
#
# Rates are Mbit/s per host link, each way (0: not capped). Strategies (default all): no_shard, full_shard,
# full_shard_bf16, hybrid_shard, hybrid_shard_zero2, full_shard_zeropp (bf16, qwZ + hpZ of 2 + qgZ),
# hybrid_shard_qgz (bf16, qgZ); and islands_h<H>_b<BITS>[_f<F>][_o<TAU>]: one island per host (parallel.islands=2),
# hybrid_shard inside, DiLoCo's outer step every H steps in BITS-bit pseudo-gradients (32, 16, 8, 4), F fragments,
# each exchange overlapped with TAU inner steps (outer.overlap), hsdp-plan's island row predicting it. An island
# point runs max(--steps, H + TAU + 1) steps and its step is the mean of the last H (an interval with one exchange
# started and one applied), not the median. The model: the deck's (the quickstart's: 0.81M parameters) with
# micro_batch 8 x 64 tokens per rank, so a step computes for tens of milliseconds on this machine, against up to a few seconds of
# communication at 30 Mbit/s. measured_step_ms is the median of steps 2..N (step 1 warms up). --calibration-iters:
# hsdp-commbench's iterations for the small messages (1 and 64 KiB: the latency) and for 256 KiB to 4 MiB (the
# bandwidth by size). --tcp-eager: Open MPI's TCP transport sends messages up to BYTES eagerly (btl_tcp_eager_limit,
# rndv_eager_limit and max_send_size; default 64 KiB, 64 KiB, 128 KiB): a larger message goes by rendezvous, whose
# fragments move only while both ranks are inside MPI calls, so a collective in flight stalls while its ranks
# compute; eager, the kernel carries it meanwhile. For every run of the study, calibration included. Needs root
# and network namespaces; exit 77 with the reason where they cannot be made.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${HSDP_BUILD_DIR:-$root/build}
rates=0,300,100,30
strategies=no_shard,full_shard,full_shard_bf16,hybrid_shard,hybrid_shard_zero2,full_shard_zeropp,hybrid_shard_qgz
steps=8
micro_batch=8
calibration_iters=32,8
tcp_eager=
deck=$root/input/quickstart.ini
work=${TMPDIR:-/tmp}/hsdp_bandwidth
json=
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    -h | --help) ;;
    --*) (($# >= 2)) || { echo "bandwidth.sh: $1 needs a value (--help lists the options)" >&2; exit 2; } ;;
  esac
  case $1 in
    --rates) rates=$2; shift 2 ;;
    --strategies) strategies=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --micro-batch) micro_batch=$2; shift 2 ;;
    --calibration-iters) calibration_iters=$2; shift 2 ;;
    --tcp-eager) tcp_eager=$2; shift 2 ;;
    --deck) deck=$(readlink -f "$2"); shift 2 ;;
    --build) build=$(readlink -f "$2"); shift 2 ;;
    --work) work=$2; shift 2 ;;
    --json) mkdir -p "$(dirname "$2")" && json=$(readlink -f "$(dirname "$2")")/$(basename "$2" .jsonl).jsonl; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) echo "bandwidth.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
if ! [[ $steps =~ ^[0-9]+$ ]] || ((steps < 3)); then echo "bandwidth.sh: --steps $steps: need >= 3" >&2; exit 2; fi
if ! [[ $micro_batch =~ ^[1-9][0-9]*$ ]]; then echo "bandwidth.sh: --micro-batch $micro_batch: need >= 1" >&2; exit 2; fi
if ! [[ $calibration_iters =~ ^[1-9][0-9]*,[1-9][0-9]*$ ]]; then
  echo "bandwidth.sh: --calibration-iters $calibration_iters: need SMALL,LARGE (two positive integers)" >&2
  exit 2
fi
small_iters=${calibration_iters%,*} large_iters=${calibration_iters#*,}
if [[ -n $tcp_eager ]]; then
  [[ $tcp_eager =~ ^[1-9][0-9]*$ ]] || { echo "bandwidth.sh: --tcp-eager $tcp_eager: need a number of bytes" >&2; exit 2; }
  # mpirun hands OMPI_MCA_* to every rank, on every host
  export OMPI_MCA_btl_tcp_eager_limit=$tcp_eager OMPI_MCA_btl_tcp_rndv_eager_limit=$tcp_eager
  export OMPI_MCA_btl_tcp_max_send_size=$tcp_eager
fi
for rate in ${rates//,/ }; do
  [[ $rate =~ ^[0-9]+$ ]] || { echo "bandwidth.sh: --rates: '$rate' is not a whole number of Mbit/s" >&2; exit 2; }
done
keys_of() { # STRATEGY -> its deck keys; the hsdp-plan row after a tab
  case $1 in
    no_shard) printf '%s\t%s\n' "--parallel.sharding=no_shard" no_shard ;;
    full_shard) printf '%s\t%s\n' "--parallel.sharding=full_shard" full_shard ;;
    full_shard_bf16) printf '%s\t%s\n' "--parallel.sharding=full_shard --precision.param=bf16 --precision.reduce=bf16" full_shard ;;
    hybrid_shard) printf '%s\t%s\n' "--parallel.sharding=hybrid_shard" hybrid_shard ;;
    hybrid_shard_zero2) printf '%s\t%s\n' "--parallel.sharding=hybrid_shard_zero2" hybrid_shard_zero2 ;;
    full_shard_zeropp) printf '%s\t%s\n' "--parallel.sharding=full_shard --precision.param=bf16 --precision.reduce=bf16 --zeropp.quantized_weights=true --zeropp.hpz_partition_size=2 --zeropp.quantized_gradients=true" "full_shard+qwZ+hpZ+qgZ" ;;
    hybrid_shard_qgz) printf '%s\t%s\n' "--parallel.sharding=hybrid_shard --precision.param=bf16 --precision.reduce=bf16 --zeropp.quantized_gradients=true" "hybrid_shard+qgZ" ;;
    islands_h*)
      [[ $1 =~ ^islands_h([1-9][0-9]*)_b(32|16|8|4)(_f([1-9][0-9]*))?(_o([0-9]+))?$ ]] || return 1
      printf '%s\t%s\n' "--parallel.islands=2 --parallel.sharding=hybrid_shard --outer.inner_steps=${BASH_REMATCH[1]} --outer.bits=${BASH_REMATCH[2]} --outer.fragments=${BASH_REMATCH[4]:-1} --outer.overlap=${BASH_REMATCH[6]:-0}" islands ;;
    *) return 1 ;;
  esac
}
for s in ${strategies//,/ }; do
  keys_of "$s" >/dev/null || { echo "bandwidth.sh: --strategies: unknown strategy '$s'" >&2; exit 2; }
done
for tool in hsdp-train hsdp-data hsdp-plan hsdp-commbench hsdp-bench-train-cpu; do
  [[ -x $build/bin/$tool ]] || { echo "bandwidth.sh: $build/bin/$tool not built" >&2; exit 2; }
done
# The deck's shape, for the compute benchmark (the same model and micro-batch as the training runs): read before
# anything is made, so that a deck hsdp-train refuses is said (its line) and nothing is touched.
if ! shape=$("$build/bin/hsdp-train" --config "$deck" --print-config 2>&1); then
  echo "bandwidth.sh: --deck '$deck': $(tail -n 1 <<<"$shape")" >&2
  exit 2
fi

cluster=$root/tools/cluster.sh
export HSDP_CLUSTER=${HSDP_CLUSTER:-hsdpbw} HSDP_CLUSTER_NET=${HSDP_CLUSTER_NET:-61}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
"$cluster" check >/dev/null || { "$cluster" check; exit 77; }
as_root=()
[[ $(id -u) -eq 0 ]] && as_root=(--allow-run-as-root)
# shellcheck source=tools/bench/own_dir.sh
source "$root/tools/bench/own_dir.sh"
own_dir "$work" --work bandwidth.sh
cd "$work"
trap '"$cluster" down' EXIT
HSDP_CLUSTER_OWNER=$$ "$cluster" up 2 >/dev/null # down by a watchdog too if this is killed
mapfile -t hosts < <("$cluster" hosts)
"$build/bin/hsdp-data" synth --out-dir data >/dev/null
[[ -n $json ]] && : >"$json"

value() { awk -v k="$1" '$1 == k && $2 == "=" { print $3; exit }' <<<"$shape"; }
seq_len=$(value seq_len)
padded=$(value padded_vocab_size)
((padded > 0)) || padded=$(value vocab_size)
mpirun --oversubscribe "${as_root[@]}" -np 4 "$build/bin/hsdp-bench-train-cpu" --n_layer "$(value n_layer)" \
  --n_head "$(value n_head)" --n_embd "$(value n_embd)" --block_size "$(value block_size)" \
  --vocab_size "$(value vocab_size)" --padded_vocab_size "$padded" --batch "$micro_batch" --seq_len "$seq_len" \
  --steps 20 --threads 1 --json >compute.json
common=(--config "$deck" --data.train=data/train.bin --data.val=data/val.bin --data.entropy_json=
        --train.micro_batch="$micro_batch" --train.steps="$steps" --train.eval_every=0 --log.every=1000
        --checkpoint.dir= --device.threads=1)

for rate in ${rates//,/ }; do
  for h in "${hosts[@]}"; do "$cluster" rate "$h" "$([[ $rate == 0 ]] && echo off || echo "$rate")"; done
  # The links at this rate, across the hosts (both ranks of a host sending at once, as in training): the small
  # sizes (the latency) with 32 iterations (default), whose mean a single slow message (a TCP retransmission behind
  # the tbf queue) swayed by 50x between runs with 4; 256 KiB, 1 MiB and 4 MiB (the bandwidth by size: 64 KiB moved
  # at ~90% of a capped link, 4 MiB at 55-60%) with 8, so a 30 Mbit/s link takes seconds.
  : >"comm_$rate.out"
  for sizes in "--min-bytes 1024 --max-bytes 65536 --factor 64 --max-iters $small_iters" \
    "--min-bytes 262144 --max-bytes 4194304 --factor 4 --max-iters $large_iters"; do
    # shellcheck disable=SC2086 # the sizes' options, one word each
    "$cluster" mpirun -np 4 "${as_root[@]}" "$build/bin/hsdp-commbench" --json $sizes --warmup 1 \
      >>"comm_$rate.out" 2>"comm_$rate.err" ||
      { cat "comm_$rate.err" >&2; echo "bandwidth.sh: hsdp-commbench at $rate Mbit/s failed" >&2; exit 1; }
  done
  grep '^{' "comm_$rate.out" >"comm_$rate.json"  # the JSON lines, without the transport's notes
  for s in ${strategies//,/ }; do
    IFS=$'\t' read -r keys row < <(keys_of "$s")
    point_steps=$steps
    if [[ $s =~ ^islands_h([0-9]+).*_o([0-9]+)$ ]] || [[ $s =~ ^islands_h([0-9]+) ]]; then
      # H + tau + 1 steps: their last H hold one exchange started and one applied (tau = 0: steps 2..H+1).
      needed=$((BASH_REMATCH[1] + ${BASH_REMATCH[2]:-0} + 1))
      ((needed > steps)) && point_steps=$needed
    fi
    # shellcheck disable=SC2086 # the strategy's keys, one word each
    "$cluster" mpirun -np 4 "${as_root[@]}" "$build/bin/hsdp-train" "${common[@]}" $keys --train.steps="$point_steps" \
      --log.dir="run_${rate}_$s" \
      >"run_${rate}_$s.out" 2>&1 || { cat "run_${rate}_$s.out" >&2; echo "bandwidth.sh: $s at $rate Mbit/s failed" >&2; exit 1; }
    # shellcheck disable=SC2086
    "$build/bin/hsdp-plan" --config "$deck" --nodes 2 --ranks-per-node 2 --json --train.micro_batch="$micro_batch" \
      --calibrate "comm_$rate.json" --calibrate compute.json $keys >"plan_${rate}_$s.jsonl" 2>"plan_${rate}_$s.err"
    python3 - "$s" "$rate" "$row" "run_${rate}_$s/metrics.jsonl" "plan_${rate}_$s.jsonl" <<'PY' | tee -a "${json:-/dev/null}"
import json, statistics, sys
strategy, rate, row, metrics, plan = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
steps = [json.loads(l) for l in open(metrics)][1:]  # step 1 warms up
if row == "islands":  # the last H steps: one exchange started and one applied
    steps = steps[-int(strategy.split("_")[1][1:]):]
rows = [json.loads(l) for l in open(plan)]
p = next(r for r in rows if r["strategy"] == row)
recommended = next((r["strategy"] for r in rows if r.get("recommended")), None)
# An island point's steps include its outer exchange(s): their mean is its pace.
measured = (statistics.mean if row == "islands" else statistics.median)(m["step_ms"] for m in steps)
out = {"bench": "bandwidth", "strategy": strategy, "rate_mbit": rate, "measured_step_ms": round(measured, 2),
       "predicted_step_ms": round(p["step_ms"], 2), "error": round(p["step_ms"] / measured - 1, 3),
       "tokens_per_s": round(steps[-1]["tokens"] / (measured / 1e3), 1),
       # An island point's inter-node bytes are its outer exchanges': their mean per step.
       "bytes_inter": round(statistics.mean(m["bytes_inter"] for m in steps)) if row == "islands" else steps[-1]["bytes_inter"],
       "comm_ms": round(statistics.median(m["comm_ms"] for m in steps), 2),
       "exposed_comm_ms": round(statistics.median(m["exposed_comm_ms"] for m in steps), 2),
       "predicted_comm_inter_ms": round(p["comm_inter_ms"], 2), "predicted_compute_ms": round(p["compute_ms"], 2),
       "plan_recommends": recommended}
if row == "islands":  # the outer exchange's time in the steps (all of it blocking, what the overlap left with it)
    out["outer_exposed_ms"] = round(statistics.mean(m["outer_exposed_ms"] for m in steps), 2)
print(json.dumps(out))
PY
  done
done

# The table and the curve: tokens/s against the link rate, one line per strategy (as the ZeRO++ paper's figure).
if [[ -n $json ]]; then
  python3 - "$json" "${json%.jsonl}" <<'PY'
import json, sys
points = [json.loads(l) for l in open(sys.argv[1])]
base = sys.argv[2]
rates = sorted({p["rate_mbit"] for p in points}, key=lambda r: (r == 0, r))
names = list(dict.fromkeys(p["strategy"] for p in points))
cell = {(p["strategy"], p["rate_mbit"]): p for p in points}
label = lambda r: "unlimited" if r == 0 else f"{r} Mbit/s"
with open(base + ".md", "w") as f:
    f.write("| strategy | " + " | ".join(label(r) for r in rates) + " |\n")
    f.write("|---" * (len(rates) + 1) + "|\n")
    for s in names:
        row = []
        for r in rates:
            p = cell.get((s, r))
            row.append("-" if p is None else
                       f"{p['tokens_per_s']:.0f} tok/s; {p['measured_step_ms']:.0f} ms, predicted {p['predicted_step_ms']:.0f} ({p['error']:+.0%})")
        f.write(f"| {s} | " + " | ".join(row) + " |\n")
with open(base + ".dat", "w") as f:
    for s in names:
        f.write(f"# {s}\n")
        for r in rates:
            if (s, r) in cell and r > 0:
                f.write(f"{r}\t{cell[(s, r)]['tokens_per_s']}\n")
        f.write("\n\n")
with open(base + ".gp", "w") as f:
    f.write(f'''set terminal pngcairo size 900,600 noenhanced font "sans,10"
set output "{base}.png"
set title "tokens/s against the inter-node link rate (2 hosts x 2 ranks, tc tbf per host link)"
set xlabel "link rate per host, Mbit/s (log)"
set ylabel "tokens/s (all ranks)"
set logscale xy
set key outside right top vertical
set grid
plot for [i=0:{len(names) - 1}] "{base}.dat" index i using 1:2 with linespoints title word("{" ".join(names)}", i + 1)
''')
print(f"table: {base}.md; curve: {base}.gp (gnuplot) -> {base}.png")
PY
  command -v gnuplot >/dev/null && gnuplot "${json%.jsonl}.gp"
fi
