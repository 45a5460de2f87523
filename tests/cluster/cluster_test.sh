#!/usr/bin/env bash
# hsdp-train on real hosts: two network namespaces with their own hostnames (tools/cluster.sh), mpirun launching
# across them through the cluster's rsh agent. Label `cluster`; exit 77 (skip, with the reason) where namespaces
# cannot be made.
#   cluster_test.sh CHECK BINDIR WORKDIR
# Checks:
#   transports   every strategy and ZeRO++ on 2 hosts x 2 ranks, and an island per host (hybrid_shard+qgZ inside,
#                an outer step every 2 steps in int4 across the hosts; full_shard inside, fp32 outer steps, each
#                overlapped with the next step), under Open MPI's default transports (ob1/tcp)
#                and under UCX over TCP, against the emulated 2x2 run on one host: losses, islands' losses and
#                gradient norms bit-identical, byte counters equal.
#   link_cut     the link of one host cut mid-step and never restored: the job ends with exit 4 within
#                comm.timeout_s + 10 s, naming the host; no process left on either host; resume=auto then finishes
#                with the uninterrupted run's final loss, bit for bit.
#   short_cut    a cut shorter than the launcher's and the watchdog's limits: the job goes on and ends as the
#                uninterrupted run, bit for bit.
#   save_cut     the link cut during a checkpoint save: the previous checkpoint and `latest` untouched; resume
#                finishes bit for bit.
#   host_killed  every rank on one host killed mid-step: the job ends within 10 s, nothing left on the other host;
#                resume finishes bit for bit.
#   reference    the uninterrupted run's final loss, into WORKDIR/../reference (the fault checks compute it
#                themselves when it is not there)
set -euo pipefail
check=$1
bin=$(cd "$2" && pwd)
work=$3
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster=$root/tools/cluster.sh
export HSDP_CLUSTER=hsdpt # the tests' own cluster, apart from a user's `hsdp`
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

"$cluster" check >/dev/null || { "$cluster" check; exit 77; }
rm -rf "$work"
mkdir -p "$work"
cd "$work"
trap '"$cluster" down' EXIT
HSDP_CLUSTER_OWNER=$$ "$cluster" up 2 # taken down by a watchdog too if this test is killed (a timeout)
mapfile -t hosts < <("$cluster" hosts)

as_root=()
[[ $(id -u) -eq 0 ]] && as_root=(--allow-run-as-root)
"$bin/hsdp-data" synth --out-dir data >/dev/null
common=(--config "$root/input/quickstart.ini" --data.train=data/train.bin --data.val=data/val.bin
        --data.entropy_json=data/source.json --train.eval_every=1000 --log.every=1000)

fail() {
  echo "FAIL: $*"
  exit 1
}

# Every field of metrics.jsonl that must agree between two runs: losses and norms bit for bit, the byte counters.
compare_runs() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
label = sys.argv[3]
keys = ["loss", "grad_norm", "bytes_intra", "bytes_inter", "bytes_intra_max_rank", "bytes_inter_max_rank"]
keys += [k for k in ("island_losses", "outer_fragment", "outer_applied", "outer_bytes") if k in a[0]]
assert len(a) == len(b) and a, f"{label}: {len(a)} steps against {len(b)}"
bad = [(r["step"], k, r[k], s[k]) for r, s in zip(a, b) for k in keys if r[k] != s[k]]
for step, k, x, y in bad[:5]:
    print(f"  {label}: step {step} {k}: emulated {x!r}, real hosts {y!r}")
print(f"{label}: {len(a)} steps, final loss {a[-1]['loss']!r}, inter-node bytes {a[-1]['bytes_inter']} "
      f"{'equal' if not bad else 'DIFFER'}")
sys.exit(1 if bad else 0)
PY
}

check_transports() {
  local configs=(
    "no_shard"
    "zero1"
    "shard_grad_op"
    "full_shard"
    "hybrid_shard"
    "hybrid_shard_zero2"
    "full_shard --precision.param=bf16 --precision.reduce=bf16 --zeropp.quantized_weights=true --zeropp.hpz_partition_size=2 --zeropp.quantized_gradients=true --zeropp.grad_bits=4"
    "hybrid_shard --zeropp.quantized_weights=true --zeropp.quantized_gradients=true"
    "hybrid_shard --zeropp.quantized_gradients=true --parallel.islands=2 --outer.inner_steps=2 --outer.bits=4"
    "full_shard --parallel.islands=2 --outer.inner_steps=2 --outer.bits=32 --outer.overlap=1"
  )
  local ucx=(--mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any --mca osc ucx -x "UCX_TLS=tcp,self,sm"
             -x UCX_NET_DEVICES=eth0)
  local i=0 failed=0 config name args
  for config in "${configs[@]}"; do
    i=$((i + 1))
    read -r name args <<<"$config"
    # shellcheck disable=SC2206 # the extra keys, one word each
    local extra=(--parallel.sharding="$name" $args --train.steps=5 --checkpoint.dir=)
    mpirun --oversubscribe "${as_root[@]}" -np 4 "$bin/hsdp-train" "${common[@]}" "${extra[@]}" \
      --topology.ranks_per_node=2 --log.dir="emulated$i" >"emulated$i.out" 2>&1 || { cat "emulated$i.out"; fail "emulated run $i"; }
    "$cluster" mpirun -np 4 "${as_root[@]}" "$bin/hsdp-train" "${common[@]}" "${extra[@]}" --log.dir="ob1_$i" \
      >"ob1_$i.out" 2>&1 || { cat "ob1_$i.out"; fail "ob1/tcp run $i ($config)"; }
    "$cluster" mpirun -np 4 "${as_root[@]}" "${ucx[@]}" "$bin/hsdp-train" "${common[@]}" "${extra[@]}" \
      --log.dir="ucx_$i" >"ucx_$i.out" 2>&1 || { cat "ucx_$i.out"; fail "UCX run $i ($config)"; }
    compare_runs "emulated$i" "ob1_$i" "ob1/tcp   $config" || failed=1
    compare_runs "emulated$i" "ucx_$i" "ucx/tcp   $config" || failed=1
  done
  # The real mesh: nodes by hostname, and the side channel's note only where the transport lacks one-sided MPI.
  "$cluster" mpirun -np 4 "${as_root[@]}" "$bin/hsdp-train" "${common[@]}" --print-mesh >mesh.out 2>&1
  grep -q "node 1 (${hosts[1]}): ranks 2 3" mesh.out || { cat mesh.out; fail "the mesh does not place ranks 2, 3 on ${hosts[1]}"; }
  grep -q "side channel is not available" ob1_1.out || fail "ob1/tcp: no note that the side channel is unavailable"
  grep -q "side channel" ucx_1.out && fail "UCX: the side channel should be available"
  ((failed == 0)) || fail "a run on real hosts differs from the emulated one"
  echo "PASS: ${#configs[@]} configurations x 2 transports equal the emulated 2x2 runs"
}

# ---- faults on real links and hosts (hybrid_shard, 300 steps, a checkpoint every 100) ----
timeout_s=20     # comm.timeout_s and checkpoint.timeout_s
lost_host_s=8    # the launcher's limit for a silent host (below the watchdog's: see tools/cluster.sh mpirun)
steps=300
fault_args=(--train.steps="$steps" --checkpoint.every=100 --comm.timeout_s="$timeout_s"
            --checkpoint.timeout_s="$timeout_s" --log.every=100)
export HSDP_LOST_HOST_S=$lost_host_s

run_job() { # LOGDIR CKPTDIR [ARGS...]: in the foreground
  local log=$1 ckpt=$2
  shift 2
  "$cluster" mpirun -np 4 "${as_root[@]}" "$bin/hsdp-train" "${common[@]}" "${fault_args[@]}" --log.dir="$log" \
    --checkpoint.dir="$ckpt" "$@"
}

final_loss() { python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(repr(r[-1]["loss"]) if r[-1]["step"]==int(sys.argv[2]) else "step %d" % r[-1]["step"])' "$1/metrics.jsonl" "$steps"; }

# Waits until run $1 has logged step $2 (metrics.jsonl), at most 120 s.
wait_step() {
  local deadline=$((SECONDS + 120)) last
  while ((SECONDS < deadline)); do
    last=$(tail -n 1 "$1/metrics.jsonl" 2>/dev/null | sed -n 's/^{"step":\([0-9]*\).*/\1/p')  || true
    [[ -n $last ]] && ((last >= $2)) && return 0
    kill -0 "$job" 2>/dev/null || fail "the job ended before step $2: $(tail -n 5 job.out)"
    sleep 0.1
  done
  fail "step $2 not reached in 120 s"
}

# Fails if a process of the job is still running on a host: on HOST_CUT (if given) after GRACE_S seconds, elsewhere
# after 2 s. A host whose link is cut cannot be told that the job ended; its processes end on their own timers (Open
# MPI's daemon there misses the launcher for HSDP_LOST_HOST_S, then kills its ranks; hsdp's abort grace is 5 s), so
# they get GRACE_S = lost_host_s + 10 s to go.
nothing_left() { # [HOST_CUT GRACE_S]
  local h left grace deadline
  for h in "${hosts[@]}"; do
    grace=2
    [[ $h == "${1:-}" ]] && grace=$2
    deadline=$((SECONDS + grace))
    while left=$("$cluster" pids "$h" | tr '\n' ' ') && [[ -n ${left// /} ]] && ((SECONDS < deadline)); do
      sleep 0.2
    done
    [[ -z ${left// /} ]] || fail "processes left on $h $grace s after the job ended: $(ps -o pid=,comm= -p "${left// /,}" 2>/dev/null | tr '\n' ';')"
  done
}

# The uninterrupted run's final loss. The emulated 2x2 run on this host gives it (the transports check shows real
# hosts and emulated nodes agree bit for bit); computed once into WORKDIR/../reference when the tests share one.
reference() {
  local shared=$work/../reference
  # (Only a figure newer than the binary: a rebuilt hsdp-train may train differently.)
  if [[ ! -s $shared/final_loss || ! $shared/final_loss -nt $bin/hsdp-train ]]; then
    rm -rf "$shared"
    mkdir -p "$shared"
    mpirun --oversubscribe "${as_root[@]}" -np 4 "$bin/hsdp-train" "${common[@]}" "${fault_args[@]}" \
      --topology.ranks_per_node=2 --log.dir="$shared/ref" --checkpoint.dir="$shared/ref_ck" \
      --checkpoint.resume=none --checkpoint.overwrite=true >"$shared/ref.out" 2>&1 ||
      { cat "$shared/ref.out"; fail "the uninterrupted run"; }
    final_loss "$shared/ref" >"$shared/final_loss.tmp"
    mv "$shared/final_loss.tmp" "$shared/final_loss"
  fi
  ref_loss=$(cat "$shared/final_loss")
  echo "uninterrupted: final loss at step $steps $ref_loss"
}

resume_matches() {
  local loss
  "$cluster" mpirun -np 4 "${as_root[@]}" "$bin/hsdp-train" "${common[@]}" "${fault_args[@]}" --log.dir=resumed \
    --checkpoint.dir=ck --checkpoint.resume=auto --checkpoint.overwrite=false >resume.out 2>&1 ||
    { cat resume.out; fail "the resumed run"; }
  loss=$(final_loss resumed)
  echo "resumed ($(grep -o 'resum[a-z]* [^;]*step [0-9]*' resume.out | head -n 1)): final loss $loss"
  [[ $loss == "$ref_loss" ]] || fail "resumed final loss $loss, uninterrupted $ref_loss"
}

# Starts the faulty run in the background: $job, its output in job.out.
start_job() {
  run_job run ck --checkpoint.resume=none --checkpoint.overwrite=true >job.out 2>&1 &
  job=$!
}

# Waits for the job; sets $status and $took (seconds since $t0).
finish_job() {
  status=0
  wait "$job" || status=$?
  took=$((SECONDS - t0))
  echo "job ended: exit $status after $took s"
  grep -vE '^(step|eval) ' job.out | grep -v '^$' | sed 's/^/  | /' | head -n 30
}

check_link_cut() {
  reference
  start_job
  wait_step run 150
  t0=$SECONDS
  "$cluster" link "${hosts[1]}" down
  finish_job
  ((status == 4)) || fail "exit $status, expected 4"
  ((took <= timeout_s + 10)) || fail "$took s, more than comm.timeout_s + 10 = $((timeout_s + 10)) s"
  grep -q "host ${hosts[1]} stopped answering" job.out || fail "no line names ${hosts[1]}"
  nothing_left "${hosts[1]}" $((lost_host_s + 10))
  "$cluster" link "${hosts[1]}" up
  resume_matches
  echo "PASS: link cut: exit $status in $took s; resumed bit for bit"
}

# The cut: half what the launcher always tolerates. Open MPI's daemon connections are probed once idle for
# lost_host_s / 3 = 2 s, then every lost_host_s / 6 = 1 s, and dropped at the 4th unanswered probe: a cut that starts
# just before a probe is due ends the job after 4 s (not lost_host_s = 8, which is the most, for a connection idle
# when the cut starts). A 3 s cut left 1 s of that for the `link` commands and the sleep on a loaded machine.
short_cut_s=2

check_short_cut() {
  reference
  start_job
  wait_step run 150
  local cut_start=$EPOCHREALTIME cut_s
  "$cluster" link "${hosts[1]}" down
  sleep "$short_cut_s"
  "$cluster" link "${hosts[1]}" up
  cut_s=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$cut_start" \
    "$EPOCHREALTIME")
  t0=$SECONDS
  finish_job
  ((status == 0)) || fail "exit $status after a $cut_s s cut"
  local loss
  loss=$(final_loss run)
  [[ $loss == "$ref_loss" ]] || fail "final loss $loss after a $cut_s s cut, uninterrupted $ref_loss"
  echo "PASS: a $cut_s s cut (limits: host 4-${lost_host_s} s, collective $timeout_s s): the job went on," \
    "final loss $loss as uninterrupted"
}

check_save_cut() {
  reference
  # Rank 2 (on the second host) pauses in the middle of writing each checkpoint's data: the window for the cut.
  HSDP_FAULT=sleep=6:checkpoint@2 start_job
  local deadline=$((SECONDS + 120)) before
  while [[ ! -e ck/step_100.h5 || ! -e ck/step_200.h5.tmp ]]; do
    ((SECONDS < deadline)) || fail "the second save did not start"
    kill -0 "$job" 2>/dev/null || fail "the job ended early: $(tail -n 5 job.out)"
    sleep 0.05
  done
  before=$(cd ck && md5sum step_100.h5 latest)
  t0=$SECONDS
  "$cluster" link "${hosts[1]}" down
  finish_job
  ((status == 4)) || fail "exit $status, expected 4"
  [[ $(cd ck && md5sum step_100.h5 latest) == "$before" ]] || fail "step_100.h5 or latest changed"
  [[ ! -e ck/step_200.h5 ]] || fail "a step_200.h5 was committed"
  nothing_left "${hosts[1]}" $((lost_host_s + 10))
  "$cluster" link "${hosts[1]}" up
  resume_matches
  echo "PASS: link cut during a save: exit $status in $took s; step_100.h5 and latest unchanged; resumed bit for bit"
}

check_host_killed() {
  reference
  start_job
  wait_step run 150
  local victims
  victims=$("$cluster" pids "${hosts[1]}" | while read -r p; do [[ $(cat "/proc/$p/comm" 2>/dev/null) == hsdp-train ]] && echo "$p"; done | tr '\n' ' ')
  [[ -n ${victims// /} ]] || fail "no hsdp-train on ${hosts[1]}"
  t0=$SECONDS
  # shellcheck disable=SC2086 # a list of PIDs
  kill -KILL $victims
  finish_job
  ((status != 0)) || fail "exit 0 after the ranks of ${hosts[1]} were killed"
  ((took <= 10)) || fail "$took s, more than 10 s"
  nothing_left
  resume_matches
  echo "PASS: every rank of ${hosts[1]} killed: exit $status in $took s, nothing left; resumed bit for bit"
}

case $check in
transports) check_transports ;;
reference)
  rm -rf "$work/../reference"
  reference
  ;;
link_cut) check_link_cut ;;
short_cut) check_short_cut ;;
save_cut) check_save_cut ;;
host_killed) check_host_killed ;;
*)
  echo "unknown check '$check'"
  exit 2
  ;;
esac
