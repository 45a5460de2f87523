#!/usr/bin/env bash
# hsdp-plan's numbers equal what hsdp-train measures, exactly (label e2e):
#
#   matches_hsdp_train.sh HSDP_PLAN HSDP_TRAIN HSDP_DATA DECK WORK MPIEXEC...   (MPIEXEC: the 4-rank launcher)
#
# For every strategy (fp32), the ZeRO++ rows (bf16: full_shard+qwZ+hpZ+qgZ with hpZ groups of 2, hybrid_shard+qgZ) and
# full_shard and hybrid_shard with train.grad_accum=2, hsdp-train runs 2 steps of DECK on 4 ranks as 2 emulated nodes x
# 2; the last line of its metrics.jsonl must carry the job-wide bytes_intra and bytes_inter (all ranks) that `hsdp-plan
# --json` gives under the same names for the same deck on --nodes 2 --ranks-per-node 2, the busiest rank's
# bytes_intra_max_rank and bytes_inter_max_rank under the same names, and the same params + grads + optimizer memory and
# activation memory (rank 0's), exactly. What the run held beyond them (peak_total - model state - activations) depends
# on when the nonblocking collectives complete, so it is checked against hsdp-plan's transient estimate as a bound: at
# most the estimate, also where the host runs ahead of the queues as on a GPU (four cases on device.streams=threads,
# zero1 in bf16 among them, whose queues run on worker threads after random delays; without the engine's bound on units
# alive, one rank of bf16 full_shard with checkpointing peaked at 33.2 MB against 17.9 MB inline and 23.9 MB planned).
# Last, on a slow inter-node link (--inter-gbyte-s 0.5) hsdp-plan recommends full_shard+qwZ+hpZ+qgZ: hsdp-train runs
# with nothing but the "deck_keys" of that recommendation and must equal that row.
set -euo pipefail
plan=$1 train=$2 data=$3 deck=$4 work=$5
shift 5
mpiexec=("$@")
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$data" synth --out-dir "$work/data" >/dev/null

common=(--config "$deck" --topology.ranks_per_node=2 --train.steps=2 --train.eval_every=0 --log.every=1
        --data.train="$work/data/train.bin" --data.val="$work/data/val.bin"
        --data.entropy_json="$work/data/source.json" --device.threads=1 --checkpoint.dir=)
bf16=(--precision.param=bf16 --precision.reduce=bf16)
zeropp_full=(--parallel.sharding=full_shard --zeropp.quantized_weights=true --zeropp.hpz_partition_size=2
             --zeropp.quantized_gradients=true)
zeropp_hybrid=(--parallel.sharding=hybrid_shard --zeropp.quantized_gradients=true)

# number KEY LINE: the integer value of "KEY": in a one-line JSON object.
number() { grep -o "\"$1\":[0-9]*" <<<"$2" | head -1 | cut -d: -f2; }

"$plan" --config "$deck" --nodes 2 --ranks-per-node 2 --json >"$work/plan_fp32.jsonl"
"$plan" --config "$deck" --nodes 2 --ranks-per-node 2 --json "${bf16[@]}" --zeropp.hpz_partition_size=2 \
  >"$work/plan_bf16.jsonl"
"$plan" --config "$deck" --nodes 2 --ranks-per-node 2 --json --train.grad_accum=2 >"$work/plan_accum2.jsonl"
"$plan" --config "$deck" --nodes 2 --ranks-per-node 2 --json --inter-gbyte-s 0.5 >"$work/plan_slow_inter.jsonl"

checked=0
check() { # LABEL ROW PLAN_FILE TRAIN_ARGS...
  local label=$1 row=$2 plan_file=$3
  shift 3
  local dir=$work/run_$label
  OMP_NUM_THREADS=1 "${mpiexec[@]}" "$train" "${common[@]}" --log.dir="$dir" "$@" >"$dir.log" 2>&1 ||
    { cat "$dir.log" >&2; fail "$label: hsdp-train failed"; }
  local measured expected
  measured=$(tail -n 1 "$dir/metrics.jsonl")
  expected=$(grep -F "\"strategy\":\"$row\"" "$plan_file") || fail "$label: no row in hsdp-plan --json"
  local memory params grads optimizer
  memory=$(grep -o '"memory":{[^}]*}' <<<"$measured")
  params=$(number params "$memory")
  grads=$(number grads "$memory")
  optimizer=$(number optimizer "$memory")
  local got_state=$((params + grads + optimizer)) want_state
  want_state=$(number model_state_bytes "$expected")
  for key in bytes_intra bytes_inter; do
    local got want
    got=$(number $key "$measured")
    want=$(number $key "$expected")
    [[ -n $got && $got == "$want" ]] || fail "$label: hsdp-train $key (all ranks) $got, hsdp-plan $want"
  done
  for key in bytes_intra_max_rank bytes_inter_max_rank; do
    local got want
    got=$(number $key "$measured")
    want=$(number $key "$expected")
    [[ -n $got && $got == "$want" ]] || fail "$label: hsdp-train $key $got, hsdp-plan $key $want"
  done
  [[ $got_state == "$want_state" ]] ||
    fail "$label: hsdp-train params+grads+optimizer $got_state ($params+$grads+$optimizer), hsdp-plan $want_state"
  local activations want_activations peak transient want_transient
  activations=$(number activations "$memory")
  want_activations=$(number activation_bytes "$expected")
  [[ -n $activations && $activations == "$want_activations" ]] ||
    fail "$label: hsdp-train activations $activations, hsdp-plan $want_activations"
  peak=$(number peak_total "$memory")
  transient=$((peak - got_state - activations))
  want_transient=$(number transient_bytes "$expected")
  ((transient <= want_transient)) || fail "$label: hsdp-train held $transient transient bytes, over hsdp-plan's $want_transient"
  echo "$label: all ranks bytes_intra $(number bytes_intra "$measured"), bytes_inter $(number bytes_inter "$measured"), model state $got_state, activations $activations: equal; transient $transient <= estimate $want_transient"
  checked=$((checked + 1))
}

for strategy in no_shard zero1 shard_grad_op full_shard hybrid_shard hybrid_shard_zero2; do
  check "$strategy" "$strategy" "$work/plan_fp32.jsonl" --parallel.sharding="$strategy"
done
check full_shard_zeropp "full_shard+qwZ+hpZ+qgZ" "$work/plan_bf16.jsonl" "${bf16[@]}" "${zeropp_full[@]}"
check hybrid_shard_qgz "hybrid_shard+qgZ" "$work/plan_bf16.jsonl" "${bf16[@]}" "${zeropp_hybrid[@]}"
# Accumulation: full_shard gathers every micro-batch and reduces once; hybrid_shard reduces inside the node every
# micro-batch and across nodes once.
for strategy in full_shard hybrid_shard; do
  check "${strategy}_accum2" "$strategy" "$work/plan_accum2.jsonl" --parallel.sharding="$strategy" --train.grad_accum=2
done
# The host ahead of the queues (device.streams=threads): the same counters, the transient still within the estimate.
threads=(--device.streams=threads)
check full_shard_threads full_shard "$work/plan_fp32.jsonl" --parallel.sharding=full_shard "${threads[@]}"
check hybrid_shard_qgz_threads "hybrid_shard+qgZ" "$work/plan_bf16.jsonl" "${bf16[@]}" "${zeropp_hybrid[@]}" "${threads[@]}"
check full_shard_accum2_threads full_shard "$work/plan_accum2.jsonl" --parallel.sharding=full_shard \
  --train.grad_accum=2 "${threads[@]}"
# zero1 with bf16 parameters: its gather of every unit after AdamW is enqueued at once, each staging a bf16 shard.
check zero1_bf16_threads zero1 "$work/plan_bf16.jsonl" "${bf16[@]}" --parallel.sharding=zero1 "${threads[@]}"
# The recommendation, run with the deck keys hsdp-plan prints for it (and nothing else about the strategy).
recommended=$(grep -F '"recommended":true' "$work/plan_slow_inter.jsonl") || fail "no recommended row"
row=$(grep -o '"strategy":"[^"]*"' <<<"$recommended" | cut -d'"' -f4)
keys=$(grep -o '"deck_keys":"[^"]*"' <<<"$recommended" | cut -d'"' -f4)
[[ $row == "full_shard+qwZ+hpZ+qgZ" ]] || fail "--inter-gbyte-s 0.5: recommended $row, expected full_shard+qwZ+hpZ+qgZ"
read -ra deck_keys <<<"$keys"
echo "recommended $row, deck keys: ${deck_keys[*]}"
check recommended "$row" "$work/plan_slow_inter.jsonl" "${deck_keys[@]}"
[[ $checked == 15 ]] || fail "checked $checked cases, expected 15"
echo "all 14 cases: hsdp-plan equals hsdp-train's counters, and bounds its transient memory"
