#!/usr/bin/env bash
# Slurm across real hosts (label cluster): two hosts of tools/cluster.sh, slurmctld on the first, one slurmd on each
# (munge in this namespace: its socket is a file every host sees), the job scripts as they ship.
#   slurm_hosts_test.sh CHECK BINDIR WORKDIR
# Checks:
#   placement  train.sbatch --print-mesh on 2 nodes x 2 tasks: `scontrol show hostnames` of the job's node list,
#              in order, holds ranks 0 1 and 2 3 as the mesh places them; then train.sbatch trains 20 steps across
#              the nodes (srun --mpi=pmix) to COMPLETED
#   requeue    train_requeue.sbatch on 2 nodes, signalled as Slurm does before the time limit (USR1 to the batch
#              shell): checkpoint, exit 3, requeue, resume; losses identical to the uninterrupted run
#   study      study.sbatch: 2 points as a job array, each on 2 nodes x 2 tasks, COMPLETED and collected
# Exit 77 (skip, with the reason): namespaces cannot be made, or Slurm cannot be installed or started.
set -euo pipefail
check=$1
bin=$(cd "$2" && pwd)
work=$3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cluster=$repo/tools/cluster.sh
sweep=$repo/tools/sweep/hsdp-sweep
export HSDP_CLUSTER=hsdpt HSDP_TRAIN=$bin/hsdp-train

"$cluster" check >/dev/null || { "$cluster" check; exit 77; }
rm -rf "$work"
mkdir -p "$work"
cd "$repo"
# shellcheck source=tests/slurm/cluster.sh
source "$repo/tests/slurm/cluster.sh" # cluster_install, cluster_plugin_dir, cluster_wait_job, cluster_job_states
cluster_install || { echo "SKIP: Slurm is not installed and cannot be installed here"; exit 77; }
plugins=$(cluster_plugin_dir) || { echo "SKIP: no Slurm plugin directory found"; exit 77; }

fail() {
  echo "FAIL: $*" >&2
  for f in "$state"/log/*; do
    [[ -f $f ]] && { echo "----- $f (last 20 lines)"; tail -n 20 "$f"; } >&2
  done
  exit 1
}

state=$work/slurm
mkdir -p "$state"/{state,spool,log,munge}
chmod 711 "$state"
chmod 700 "$state/munge"
munged_pid=
stop_all() {
  "$cluster" down # every slurmd, slurmctld, slurmstepd and rank runs inside the hosts
  [[ -n $munged_pid ]] && kill "$munged_pid" 2>/dev/null
  wait 2>/dev/null || true
}
trap stop_all EXIT
HSDP_CLUSTER_OWNER=$$ "$cluster" up 2 # taken down by a watchdog too if this test is killed (a timeout)
mapfile -t hosts < <("$cluster" hosts)

# The Slurm clients talk to slurmctld on the first host: run them there (this namespace has no cluster address).
for tool in sbatch scontrol squeue scancel sinfo; do
  eval "$tool() { \"\$cluster\" exec \"\${hosts[0]}\" $tool \"\$@\"; }"
done

dd if=/dev/urandom of="$state/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$state/munge/munge.key"
munged --foreground --force --key-file="$state/munge/munge.key" --socket="$state/munge.socket" \
  --pid-file="$state/munge/munged.pid" --seed-file="$state/munge/munged.seed" \
  --log-file="$state/log/munged.log" >/dev/null 2>&1 &
munged_pid=$!
for _ in $(seq 50); do [[ -S $state/munge.socket ]] && break; sleep 0.1; done
[[ -S $state/munge.socket ]] || fail "munged did not start"

addr_of() { "$cluster" exec "$1" hostname -I | awk '{print $1}'; }
mem=$(free -m | awk '/^Mem:/ {print int($2 * 0.4)}')
mpi_default=none
[[ -e $plugins/mpi_pmix.so ]] && mpi_default=pmix
export SLURM_CONF=$state/slurm.conf
# Each host is declared with 2 CPUs whatever nproc says (the hosts share this machine's cores). A requeued job starts
# cred_expire (10 s) after its requeue at the scheduler's next pass: every 2 s here (Slurm's defaults: 60 and 30 s).
cat >"$SLURM_CONF" <<EOF
ClusterName=hsdphosts
SlurmctldHost=${hosts[0]}
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$state/munge.socket,cred_expire=10
PluginDir=$plugins
StateSaveLocation=$state/state
SlurmdSpoolDir=$state/spool/%n
TmpFS=$state/tmp/%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.%n.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=$mpi_default
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
Waittime=0
SlurmdTimeout=60
NodeName=${hosts[0]} NodeAddr=$(addr_of "${hosts[0]}") CPUs=2 RealMemory=$mem State=UNKNOWN
NodeName=${hosts[1]} NodeAddr=$(addr_of "${hosts[1]}") CPUs=2 RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=${hosts[0]},${hosts[1]} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
# The hosts share /tmp: each node's temporary directory (where Slurm's PMIx puts its per-step files) is its own.
for h in "${hosts[@]}"; do mkdir -p "$state/spool/$h" "$state/tmp/$h"; done
"$cluster" exec "${hosts[0]}" slurmctld -D -i -f "$SLURM_CONF" >"$state/log/slurmctld.out" 2>&1 &
for h in "${hosts[@]}"; do
  "$cluster" exec "$h" slurmd -D -f "$SLURM_CONF" -N "$h" >"$state/log/slurmd.$h.out" 2>&1 &
done
started=$SECONDS
for _ in $(seq 150); do
  idle=$(sinfo --noheader --format='%n %t' 2>/dev/null | awk '$2 == "idle"' | wc -l)
  ((idle == 2)) && break
  sleep 0.2
done
((idle == 2)) || fail "the two Slurm nodes did not become idle: $(sinfo --noheader --format='%n %t' 2>&1)"
echo "Slurm up on ${hosts[*]} in $((SECONDS - started)) s (MpiDefault=$mpi_default)"

"$bin/hsdp-data" synth --out-dir "$work/data" >/dev/null
data_args=(--data.train="$work/data/train.bin" --data.val="$work/data/val.bin"
  --data.entropy_json="$work/data/source.json")

expect_completed() {
  local job=$1 timeout=$2 states
  states=$(cluster_wait_job "$job" "$timeout") || fail "job $job: $states"
  echo "  ${states//$'\n'/$'\n  '}"
  awk '$3 != "COMPLETED" || $4 != "0:0" { bad = 1 } END { exit bad }' <<<"$states" ||
    fail "job $job did not complete: $states"
}

submit_train() { # NAME ARGS...: train.sbatch on 2 nodes x 2 tasks
  local name=$1
  shift
  sbatch --parsable --chdir="$repo" --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
    --output="$work/$name-%j.out" jobscripts/train.sbatch input/quickstart.ini "${data_args[@]}" "$@"
}

check_placement() {
  local job out nodes
  job=$(submit_train mesh --print-mesh)
  expect_completed "$job" 120
  out=$work/mesh-$job.out
  cat "$out"
  nodes=$(scontrol --oneliner show job "$job" | tr ' ' '\n' | sed -n 's/^NodeList=//p')
  mapfile -t placed < <(scontrol show hostnames "$nodes")
  echo "scontrol show hostnames $nodes: ${placed[*]}"
  ((${#placed[@]} == 2)) || fail "the job ran on ${#placed[@]} node(s), not 2"
  grep -q "^  node 0 (${placed[0]}): ranks 0 1$" "$out" || fail "ranks 0 1 are not on ${placed[0]}"
  grep -q "^  node 1 (${placed[1]}): ranks 2 3$" "$out" || fail "ranks 2 3 are not on ${placed[1]}"
  grep -q "real nodes from MPI_COMM_TYPE_SHARED" "$out" || fail "the mesh did not find real nodes"
  job=$(submit_train train --train.steps=20 --train.eval_every=10 --train.eval_tokens=2048 --log.every=5 \
    --log.dir="$work/train" --checkpoint.dir="$work/train_ckpt" --parallel.sharding=hybrid_shard)
  expect_completed "$job" 180
  grep -E '^step 20/20 \| loss [0-9.]+' "$work/train-$job.out" || fail "no loss line for step 20"
  grep -q '"world_size":4' "$work/train/summary.json" || fail "summary.json: not 4 ranks"
  echo "PASS: Slurm's placement (${placed[*]}) is the mesh's; train.sbatch trained 20 steps on 2 nodes x 2 ranks"
}

check_requeue() {
  local steps=120 ref job
  local run_args=(input/quickstart.ini "${data_args[@]}" --train.steps="$steps" --train.eval_every=0 --log.every=20
    --checkpoint.every="$steps" --parallel.sharding=hybrid_shard)
  # --signal: the script's own warning (USR1 300 s before the limit) would come at the start of every run of a
  # 5-minute job, whenever slurmctld's periodic check happened to fall into it (once: 0.2 s after the requeued run
  # was launched, before hsdp-train could install its handler, and the task died of USR1). Here USR1 comes from
  # the test alone.
  submit() {
    sbatch --parsable --chdir="$repo" --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 --signal=B:USR1@30 \
      --output="$work/$1-%j.out" --export=ALL,HSDP_CKPT_DIR="$work/$1_ckpt" jobscripts/train_requeue.sbatch \
      "${run_args[@]}" --log.dir="$work/$1"
  }
  ref=$(submit ref)
  expect_completed "$ref" 180
  job=$(submit int)
  for _ in $(seq 1200); do
    [[ -f $work/int/metrics.jsonl && $(wc -l <"$work/int/metrics.jsonl") -ge 40 ]] && break
    sleep 0.1
  done
  scancel --batch --signal=USR1 "$job"
  echo "sent USR1 to the batch shell of job $job after $(wc -l <"$work/int/metrics.jsonl") steps"
  expect_completed "$job" 240
  cat "$work/int-$job.out"
  grep -q "checkpointed (exit 3): requeueing job $job" "$work/int-$job.out" || fail "the job did not checkpoint and requeue"
  [[ $(grep -c "train_requeue.sbatch: job $job run" "$work/int-$job.out") == 2 ]] || fail "not 2 runs in the output"
  python3 - "$work/ref" "$work/int" "$steps" <<'PY'
import json, sys
ref_dir, int_dir, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
ref = {m["step"]: m for m in map(json.loads, open(f"{ref_dir}/metrics.jsonl"))}
got = {}
for m in map(json.loads, open(f"{int_dir}/metrics.jsonl")):
    got[m["step"]] = m
assert steps in got, f"steps logged: {sorted(got)[-3:]}"
for step in sorted(got):
    for key in ("loss", "grad_norm", "lr"):
        assert got[step][key] == ref[step][key], f"step {step}: {key} {got[step][key]!r} != {ref[step][key]!r}"
print(f"requeued run: steps {min(got)}..{steps}: loss, grad_norm and lr identical to the uninterrupted run "
      f"(final loss {got[steps]['loss']!r})")
PY
  echo "PASS: train_requeue.sbatch on 2 nodes: USR1, checkpoint, requeue, resume, identical losses"
}

check_study() {
  local job
  cat >"$work/study.ini" <<EOF
[study]
name = hosts
base = $repo/input/quickstart.ini
[fixed]
data.train = $work/data/train.bin
data.val = $work/data/val.bin
data.entropy_json = $work/data/source.json
train.steps = 10
train.eval_every = 10
train.eval_tokens = 2048
[axes]
parallel.sharding = hybrid_shard,full_shard
EOF
  "$sweep" expand "$work/study.ini" --out "$work/study" >/dev/null
  job=$(sbatch --parsable --chdir="$repo" --array=0-1 --nodes=2 --ntasks-per-node=2 --cpus-per-task=1 --time=5 \
    --output="$work/study-%A_%a.out" jobscripts/study.sbatch "$work/study")
  expect_completed "$job" 240
  for i in 0 1; do
    [[ $(cat "$work/study/point_$i/exit_code") == 0 ]] || fail "point $i: exit_code $(cat "$work/study/point_$i/exit_code")"
  done
  "$sweep" collect "$work/study" >"$work/collect.out"
  grep '^| ' "$work/study/results.md"
  [[ $(grep -c '| ok |$' "$work/study/results.md") == 2 ]] || fail "results.md: $(cat "$work/study/results.md")"
  echo "PASS: study.sbatch ran 2 points, each on 2 nodes x 2 ranks"
}

case $check in
placement) check_placement ;;
requeue) check_requeue ;;
study) check_study ;;
*)
  echo "unknown check '$check'"
  exit 2
  ;;
esac
