#!/usr/bin/env bash
# A throw-away one-node Slurm cluster on this machine, for the `slurm` tests. Sourced, not run:
#
#   source tests/slurm/cluster.sh
#   cluster_start            # installs what is missing, starts munged, slurmctld, slurmd; waits for idle
#   sbatch ...               # SLURM_CONF points at the temporary cluster
#   (cluster_stop runs from the EXIT trap that cluster_start installs)
#
# Everything lives in one temporary directory ($CLUSTER_DIR): munge key and socket, slurm.conf, state,
# spool, logs. Nothing under /etc is changed and no system service is started (no systemd needed).
# Daemons run in the foreground as children of this shell and are stopped by PID, on every exit path.
# The node is declared with $CLUSTER_CPUS CPUs (default 4, whatever nproc says) so that 4 tasks fit on
# a 2-core machine; slurmd accepts the over-declaration through SlurmdParameters=config_overrides.
#
# Requeued jobs wait cred_expire seconds before they start again: 10 here (Slurm's default is 120), and then for the
# scheduler's next pass: every 2 s here (sched_interval, bf_interval; Slurm's defaults are 60 and 30 s).
#
# CLUSTER_GHOST_NODES=N (default 0) declares N more nodes like the real one, DOWN and never started (their slurmd
# port is one nobody listens on): a job that needs more than one node is then accepted and stays PENDING, and
# `scontrol show job` tells how many nodes and tasks Slurm gave it, without a second machine.
#
# Return codes: cluster_start returns 77 (the tests' SKIP code) when Slurm cannot be installed or
# started here, after printing why.

CLUSTER_SKIP=77
CLUSTER_CPUS=${CLUSTER_CPUS:-4}
CLUSTER_PIDS=()

cluster_log() { echo "[cluster] $*"; }

# Installs slurm-wlm and friends through apt-get when a command is missing. The Debian packages try to
# start their services; without an init system (or with policy-rc.d denying it) that is a no-op, and any
# munged a package did start is not ours and is left alone: ours uses its own socket.
cluster_install() {
  local need=()
  command -v munged >/dev/null || need+=(munge)
  command -v slurmctld >/dev/null || need+=(slurmctld)
  command -v slurmd >/dev/null || need+=(slurmd)
  command -v sbatch >/dev/null || need+=(slurm-client slurm-wlm)
  if command -v dpkg-query >/dev/null &&
    ! dpkg-query -W -f='${Status}' libpmix-dev 2>/dev/null | grep -q "install ok installed"; then
    need+=(libpmix-dev)
  fi
  ((${#need[@]} == 0)) && return 0
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    cluster_log "missing ${need[*]} and cannot install them (needs root and apt-get)"
    return 1
  fi
  cluster_log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 ||
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1; }
}

# $1 (default 2) TCP ports nobody listens on (the kernel's choice), so two clusters on one machine do not collide.
cluster_free_ports() {
  python3 - "${1:-2}" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

cluster_plugin_dir() {
  local d
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm \
    /usr/local/lib/slurm; do
    [[ -e $d/select_cons_tres.so ]] && { echo "$d"; return 0; }
  done
  return 1
}

cluster_write_conf() {
  local host=$1 ctld_port=$2 slurmd_port=$3 plugins=$4 ghost_port=${5:-} mem mpi_default=none i nodes ghosts=''
  mem=$(free -m | awk '/^Mem:/ {print int($2 * 0.8)}')
  [[ -e $plugins/mpi_pmix.so ]] && mpi_default=pmix
  nodes=$host
  for ((i = 1; i <= ${CLUSTER_GHOST_NODES:-0}; i++)); do
    nodes+=",$host-ghost$i"
    ghosts+="NodeName=$host-ghost$i NodeAddr=127.0.0.1 Port=$ghost_port CPUs=$CLUSTER_CPUS RealMemory=$mem State=DOWN Reason=ghost"$'\n'
  done
  cat >"$CLUSTER_DIR/slurm.conf" <<EOF
ClusterName=hsdptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$CLUSTER_DIR/munge.socket,cred_expire=10
PluginDir=$plugins
StateSaveLocation=$CLUSTER_DIR/state
SlurmdSpoolDir=$CLUSTER_DIR/spool
SlurmctldPidFile=$CLUSTER_DIR/slurmctld.pid
SlurmdPidFile=$CLUSTER_DIR/slurmd.pid
SlurmctldLogFile=$CLUSTER_DIR/log/slurmctld.log
SlurmdLogFile=$CLUSTER_DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$CLUSTER_DIR/tmp
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
NodeName=$host NodeAddr=127.0.0.1 CPUs=$CLUSTER_CPUS RealMemory=$mem State=UNKNOWN
${ghosts}PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

# Starts a daemon in the foreground in the background of this shell; remembers its PID.
cluster_spawn() {
  local name=$1
  shift
  "$@" >"$CLUSTER_DIR/log/$name.out" 2>&1 &
  CLUSTER_PIDS+=($!)
  cluster_log "started $name (pid $!)"
}

cluster_stop() {
  local pid i
  if [[ -n ${CLUSTER_WATCHDOG:-} ]]; then
    kill -TERM "$CLUSTER_WATCHDOG" 2>/dev/null || true
    wait "$CLUSTER_WATCHDOG" 2>/dev/null || true
    CLUSTER_WATCHDOG=
  fi
  # Jobs first, while slurmd still runs, so that no slurmstepd or task is left behind.
  if ((${#CLUSTER_PIDS[@]} >= 3)) && [[ -n ${SLURM_CONF:-} ]]; then
    scancel --quiet --user=root >/dev/null 2>&1 || true
    for _ in $(seq 100); do
      [[ -z $(squeue --noheader --states=PD,R,CG,CF,S,SO --format=%i 2>/dev/null | head -n 1) ]] && break
      sleep 0.1
    done
  fi
  for ((i = ${#CLUSTER_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${CLUSTER_PIDS[i]}
    if kill -TERM "$pid" 2>/dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
  CLUSTER_PIDS=()
  if [[ -n ${CLUSTER_DIR:-} && -d $CLUSTER_DIR && -z ${CLUSTER_KEEP:-} ]]; then
    rm -rf "$CLUSTER_DIR"
  fi
}

# If this shell dies without running its EXIT trap (SIGKILL, e.g. a test timeout), a watchdog cancels the jobs (their
# slurmstepd and tasks are not this shell's children) and stops the daemons.
cluster_start_watchdog() {
  local shell_pid=$$
  (
    trap 'exit 0' TERM
    while kill -0 "$shell_pid" 2>/dev/null; do
      sleep 1 &
      wait $!
    done
    if [[ -n ${SLURM_CONF:-} ]]; then
      scancel --quiet --user=root >/dev/null 2>&1
      for _ in $(seq 50); do
        [[ -z $(squeue --noheader --format=%i 2>/dev/null | head -n 1) ]] && break
        sleep 0.1
      done
    fi
    kill -TERM "${CLUSTER_PIDS[@]}" 2>/dev/null
    sleep 5
    kill -KILL "${CLUSTER_PIDS[@]}" 2>/dev/null
    [[ -z ${CLUSTER_KEEP:-} ]] && rm -rf "$CLUSTER_DIR"
  ) >/dev/null 2>&1 &
  CLUSTER_WATCHDOG=$!
}

# Prints the end of the daemons' logs (on failure).
cluster_dump_logs() {
  local f
  for f in "$CLUSTER_DIR"/log/*; do
    echo "----- $f (last 30 lines)"
    tail -n 30 "$f"
  done
}

cluster_start() {
  local host ctld_port slurmd_port ghost_port plugins state pid
  if ! cluster_install; then
    echo "SKIP: Slurm is not installed and cannot be installed here"
    return $CLUSTER_SKIP
  fi
  plugins=$(cluster_plugin_dir) || { echo "SKIP: no Slurm plugin directory found"; return $CLUSTER_SKIP; }
  host=$(hostname -s)
  CLUSTER_DIR=$(mktemp -d /tmp/hsdp-slurm.XXXXXX)
  chmod 711 "$CLUSTER_DIR" # munged wants its socket directory searchable by all
  mkdir -p "$CLUSTER_DIR"/{state,spool,log,tmp,munge}
  chmod 700 "$CLUSTER_DIR"/munge
  trap cluster_stop EXIT
  trap 'exit 130' INT TERM

  # munge: our own key, socket, pid and seed files.
  dd if=/dev/urandom of="$CLUSTER_DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$CLUSTER_DIR/munge/munge.key"
  cluster_spawn munged munged --foreground --force --key-file="$CLUSTER_DIR/munge/munge.key" \
    --socket="$CLUSTER_DIR/munge.socket" --pid-file="$CLUSTER_DIR/munge/munged.pid" \
    --seed-file="$CLUSTER_DIR/munge/munged.seed" --log-file="$CLUSTER_DIR/log/munged.log"
  for _ in $(seq 50); do [[ -S $CLUSTER_DIR/munge.socket ]] && break; sleep 0.1; done
  if [[ ! -S $CLUSTER_DIR/munge.socket ]]; then
    cluster_dump_logs
    echo "SKIP: munged did not start"
    return $CLUSTER_SKIP
  fi

  read -r ctld_port slurmd_port ghost_port < <(cluster_free_ports 3)
  cluster_write_conf "$host" "$ctld_port" "$slurmd_port" "$plugins" "$ghost_port"
  export SLURM_CONF=$CLUSTER_DIR/slurm.conf
  cluster_spawn slurmctld slurmctld -D -i -f "$SLURM_CONF"
  cluster_spawn slurmd slurmd -D -f "$SLURM_CONF" -N "$host"
  cluster_start_watchdog

  for _ in $(seq 150); do
    state=$(sinfo --noheader --nodes="$host" --format=%t 2>/dev/null | head -n 1)
    [[ $state == idle ]] && break
    for pid in "${CLUSTER_PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || state=dead; done
    [[ $state == dead ]] && break
    sleep 0.2
  done
  if [[ $state != idle ]]; then
    cluster_dump_logs
    echo "SKIP: the Slurm node did not become idle (state '${state:-none}')"
    return $CLUSTER_SKIP
  fi
  cluster_log "node $host idle with $CLUSTER_CPUS CPUs, MpiDefault=$(awk -F= '/^MpiDefault/ {print $2}' "$SLURM_CONF"), dir $CLUSTER_DIR"
}

# "JOBID TASKID STATE EXITCODE RESTARTS" per job (per task of an array; TASKID - for a plain job), from
# `scontrol show job` (no accounting database here; MinJobAge keeps ended jobs visible for 10 minutes).
cluster_job_states() {
  scontrol --oneliner show job "$1" 2>/dev/null | awk '{
    delete f
    for (i = 1; i <= NF; i++) { n = index($i, "="); if (n) f[substr($i, 1, n - 1)] = substr($i, n + 1) }
    task = ("ArrayTaskId" in f) ? f["ArrayTaskId"] : "-"
    print f["JobId"], task, f["JobState"], f["ExitCode"], f["Restarts"]
  }'
}

# Waits until job $1 (every task of an array) has ended, at most $2 seconds (default 120); prints its states.
# Returns 1 on timeout.
cluster_wait_job() {
  local job=$1 timeout=${2:-120} deadline states
  deadline=$((SECONDS + timeout))
  while ((SECONDS < deadline)); do
    states=$(cluster_job_states "$job")
    if [[ -n $states ]] && ! awk '$3 ~ /^(PENDING|RUNNING|CONFIGURING|COMPLETING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED|RESIZING|SUSPENDED|SIGNALING|STAGE_OUT)$/ { busy = 1 } END { exit !busy }' <<<"$states"; then
      echo "$states"
      return 0
    fi
    sleep 0.25
  done
  echo "$states"
  echo "job $job has not ended after ${timeout}s"
  return 1
}
