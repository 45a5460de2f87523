#!/usr/bin/env bash
# Trains hsdp on machines without Slurm: Open MPI's mpirun over a hostfile, ranks mapped and bound to cores.
#
#   jobscripts/mpirun_baremetal.sh [DECK] [--section.key=value ...]
#   HOSTFILE=hosts PPN=4 THREADS=8 jobscripts/mpirun_baremetal.sh input/quickstart.ini --parallel.sharding=hybrid_shard
#   DRY_RUN=1 jobscripts/mpirun_baremetal.sh ...        # print the mpirun command and exit
#
# Launch knobs (environment):
#   HOSTFILE     Open MPI hostfile, one line per node: "node01 slots=8" (default: none = this machine only)
#   PPN          ranks per node: --map-by ppr:PPN:node (default: unset = Open MPI's default, one rank per slot)
#   THREADS      cores per rank (default 1): each rank is bound to THREADS cores (--map-by ...:PE=THREADS
#                --bind-to core; not with BIND_TO=none); device.threads and OMP_NUM_THREADS are set to it
#   NP           total ranks (default: PPN x nodes of HOSTFILE when PPN is set, else mpirun's own count)
#   MAP_BY       replaces the whole --map-by value (e.g. "node" to place ranks round-robin over nodes, which hsdp
#                calls topology.placement=cyclic; "core" for consecutive ranks on a node = block)
#   BIND_TO      --bind-to value (default core). "none" unbinds everything: no PE= in --map-by, --bind-to none,
#                and OMP_PROC_BIND=false without OMP_PLACES, so neither the ranks nor their OpenMP threads are pinned
#   MPIRUN       the launcher (default mpirun); MPIRUN_ARGS: more launcher options, whitespace-separated
#   DECK         first argument, else $HSDP_DECK, else input/quickstart.ini (paths relative to the current
#                directory, as are the data paths inside the deck)
#   HSDP_ARGS    deck overrides, whitespace-separated, before the arguments after DECK (later ones win)
#   HSDP_TRAIN   the binary (default build/bin/hsdp-train next to this script's repository)
#   DRY_RUN=1    print the command instead of running it
#   HSDP_MODULES environment modules to load first, whitespace-separated (e.g. "gcc/12 openmpi/4.1 hdf5/1.14"):
#                `module load $HSDP_MODULES` (Lmod or Environment Modules; exit 2 if it fails); see "Site setup"
# Network and I/O knobs (set in the environment; each one set is exported to every rank with -x):
#   OMPI_MCA_pml=ucx          Open MPI's point-to-point layer over UCX: InfiniBand/RoCE verbs between nodes, shared
#                             memory inside one. Leave unset on machines without a fabric (Open MPI picks ob1/tcp).
#   UCX_TLS=rc,sm,self        the transports UCX may use: rc/dc/ud (InfiniBand), tcp (Ethernet), sm (shared memory)
#   UCX_NET_DEVICES=mlx5_0:1  the HCA port(s) for traffic between nodes (`ibv_devinfo` lists them)
#   NCCL_IB_HCA=mlx5_0,mlx5_1 CUDA build: the HCAs NCCL may use for GPU traffic between nodes
#   NCCL_SOCKET_IFNAME=ib0    CUDA build: the interface for NCCL's bootstrap (not lo or docker0; "^lo,docker" excludes)
#   HDF5_USE_FILE_LOCKING     default FALSE here: parallel HDF5 checkpoints on Lustre/GPFS/NFS, where flock is off
#                             or slow, fail or stall with file locking on
#   CKPT_DIR                  checkpoint.dir (needs an hsdp-train with checkpointing). On Lustre (`lfs` found) the
#                             directory is created striped over LUSTRE_STRIPE_COUNT OSTs (default -1 = all) in
#                             LUSTRE_STRIPE_SIZE pieces (default 16M): every rank writes its own hyperslab of one
#                             file, so the file should be spread over many OSTs
# A lost host: Open MPI's mpirun notices a host that stopped answering (link cut, machine down) only by TCP
#   keepalive on its daemons' connections, and only while they are idle (after an MPI_Abort it would wait ~15 min
#   for TCP). HSDP_LOST_HOST_S (default 30) is how long a host may be silent: the oob_tcp_keepalive_* parameters
#   are set from it (hsdp-train refuses a comm.timeout_s, default 300, less than 10 s above the limit they make). mpirun then ends the job with its exit code 205,
#   which this script reports as 4 (communication failure).
# Signals: SIGTERM, SIGINT (Ctrl-C), SIGHUP or SIGUSR1 to this script is passed to mpirun as SIGUSR1, which mpirun
# forwards to every rank: hsdp-train writes a checkpoint at the next step boundary (into checkpoint.dir) and exits
# 3, and so does this script. (mpirun itself would kill the ranks on SIGTERM/SIGINT, without a checkpoint: it runs
# in its own session, out of reach of the terminal's Ctrl-C.) A second signal stops mpirun at once (SIGTERM).
# Exit status: hsdp-train's (0 done, 2 bad input, 3 checkpointed on a signal, 4 communication failure).
set -euo pipefail

# Site setup: environment modules to load first. Set HSDP_MODULES (whitespace-separated, e.g. "gcc/12 openmpi/4.1
# hdf5/1.14") or write the line here; a failing `module load` is exit 2 before anything runs.
# module load gcc/12 openmpi/4.1 hdf5/1.14
if [[ -n ${HSDP_MODULES:-} ]]; then
  set +u # module init scripts and functions read unset variables
  if ! type module >/dev/null 2>&1; then
    for init in "${MODULESHOME:-/nonexistent}/init/bash" /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
      # shellcheck disable=SC1090  # the site's module init script
      [[ -r $init ]] && { source "$init"; break; }
    done
  fi
  read -r -a modules <<<"$HSDP_MODULES"
  module load "${modules[@]}" || { echo "mpirun_baremetal.sh: module load ${modules[*]} failed (HSDP_MODULES)" >&2; exit 2; }
  set -u
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deck=${1:-${HSDP_DECK:-input/quickstart.ini}}
(($# > 0)) && shift
train=${HSDP_TRAIN:-$repo/build/bin/hsdp-train}
threads=${THREADS:-1}
read -r -a env_args <<<"${HSDP_ARGS:-}"
read -r -a extra_mpirun <<<"${MPIRUN_ARGS:-}"

[[ -x $train ]] || { echo "mpirun_baremetal.sh: $train is not an executable (set HSDP_TRAIN)" >&2; exit 2; }
[[ -r $deck ]] || { echo "mpirun_baremetal.sh: cannot read deck '$deck'" >&2; exit 2; }

bind_to=${BIND_TO:-core}
export HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
export OMP_NUM_THREADS=$threads
if [[ $bind_to == none ]]; then
  # Unbound ranks: OpenMP must not pin its threads either (OMP_PLACES=cores would put every rank's thread 0
  # on the first core of the machine).
  unset OMP_PLACES
  export OMP_PROC_BIND=false
  pe=
else
  export OMP_PLACES=cores OMP_PROC_BIND=close
  pe=:PE=$threads
fi

launch=("${MPIRUN:-mpirun}")
if [[ -n ${HOSTFILE:-} ]]; then
  [[ -r $HOSTFILE ]] || { echo "mpirun_baremetal.sh: cannot read hostfile '$HOSTFILE'" >&2; exit 2; }
  launch+=(--hostfile "$HOSTFILE")
fi
np=${NP:-}
if [[ -z $np && -n ${PPN:-} ]]; then
  nodes=1
  [[ -n ${HOSTFILE:-} ]] && nodes=$(grep -cvE '^[[:space:]]*(#|$)' "$HOSTFILE")
  np=$((PPN * nodes))
fi
[[ -n $np ]] && launch+=(-np "$np")
if [[ -n ${MAP_BY:-} ]]; then
  launch+=(--map-by "$MAP_BY")
elif [[ -n ${PPN:-} ]]; then
  launch+=(--map-by "ppr:$PPN:node$pe")
else
  launch+=(--map-by "slot$pe")
fi
launch+=(--bind-to "$bind_to")
[[ $bind_to != none ]] && launch+=(--report-bindings)
((EUID == 0)) && launch+=(--allow-run-as-root)
lost_host_s=${HSDP_LOST_HOST_S:-30}
[[ $lost_host_s =~ ^[0-9]+$ && $lost_host_s -ge 3 ]] ||
  { echo "mpirun_baremetal.sh: HSDP_LOST_HOST_S must be a whole number of seconds >= 3, not '$lost_host_s'" >&2; exit 2; }
# (an interval of at least 1 s: TCP takes no 0; 3 to 5 s lose a host after a little more than they say)
launch+=(--mca oob_tcp_keepalive_time $((lost_host_s / 3))
  --mca oob_tcp_keepalive_intvl $((lost_host_s / 6 > 0 ? lost_host_s / 6 : 1)) --mca oob_tcp_keepalive_probes 4)
for var in OMPI_MCA_pml UCX_TLS UCX_NET_DEVICES NCCL_IB_HCA NCCL_SOCKET_IFNAME NCCL_DEBUG HDF5_USE_FILE_LOCKING \
  OMP_NUM_THREADS OMP_PLACES OMP_PROC_BIND; do
  [[ -n ${!var:-} ]] && launch+=(-x "$var")
done

ckpt_args=()
if [[ -n ${CKPT_DIR:-} ]]; then
  if [[ ! -d $CKPT_DIR && -z ${DRY_RUN:-} ]]; then
    mkdir -p "$CKPT_DIR"
    # New files in a striped directory inherit its layout; an existing directory keeps the one it has.
    if command -v lfs >/dev/null 2>&1; then
      lfs setstripe --stripe-count "${LUSTRE_STRIPE_COUNT:--1}" --stripe-size "${LUSTRE_STRIPE_SIZE:-16M}" "$CKPT_DIR" ||
        echo "mpirun_baremetal.sh: lfs setstripe failed on $CKPT_DIR (not on Lustre?); continuing unstriped" >&2
    fi
  fi
  ckpt_args+=(--checkpoint.dir="$CKPT_DIR")
fi

cmd=("${launch[@]}" "${extra_mpirun[@]}" "$train" --config "$deck" --device.threads="$threads" "${ckpt_args[@]}"
  "${env_args[@]}" "$@")
if [[ -n ${DRY_RUN:-} ]]; then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi
echo "mpirun_baremetal.sh: ${np:-default number of} ranks x $threads core(s), deck $deck${HOSTFILE:+, hosts $HOSTFILE}"

# mpirun runs in its own session (setsid: the terminal's Ctrl-C and hangup reach only this shell) and in the
# background, so that this shell takes the signals and passes them on. The traps are set before mpirun starts.
set +e
mpirun_pid='' signalled=0
# shellcheck disable=SC2317  # called by the traps below
forward() {
  if ((signalled++ == 0)); then
    echo "mpirun_baremetal.sh: SIG$1: asking the ranks to checkpoint and stop (SIGUSR1 through mpirun)" >&2
    [[ -n $mpirun_pid ]] && kill -USR1 "$mpirun_pid" 2>/dev/null
  else
    echo "mpirun_baremetal.sh: SIG$1 again: stopping mpirun" >&2
    [[ -n $mpirun_pid ]] && kill -TERM "$mpirun_pid" 2>/dev/null
  fi
}
for sig in TERM INT HUP USR1; do
  # shellcheck disable=SC2064  # the signal's name is fixed now
  trap "forward $sig" "$sig"
done
setsid=()
command -v setsid >/dev/null 2>&1 && setsid=(setsid)
"${setsid[@]}" "${cmd[@]}" &
mpirun_pid=$!
((signalled > 0)) && kill -USR1 "$mpirun_pid" 2>/dev/null # a signal came while mpirun was starting

# `wait` returns early (status > 128) when a trapped signal arrives: wait again until mpirun has ended; a final
# `wait` gives mpirun's own status (bash keeps it) even when mpirun ended during the trap.
wait "$mpirun_pid"
status=$?
while kill -0 "$mpirun_pid" 2>/dev/null; do
  wait "$mpirun_pid"
  status=$?
done
wait "$mpirun_pid" 2>/dev/null
last=$?
((last != 127)) && status=$last
trap - TERM INT HUP USR1
if ((status == 205)); then
  echo "mpirun_baremetal.sh: mpirun lost a host (exit 205: its link cut or the machine down; Open MPI's message above names it); exiting 4" >&2
  status=4
fi
exit "$status"
