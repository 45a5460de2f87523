#!/usr/bin/env bash
# The job scripts without a Slurm cluster (label unit): srun is a fake that records its arguments, mpirun is real.
# One check per call:
#
#   jobscripts_test.sh unbind BIN_DIR WORK     mpirun_baremetal.sh BIND_TO=none: no rank is bound (each one's
#                                              Cpus_allowed_list is the caller's), OpenMP does not pin
#                                              (OMP_PROC_BIND=false, no OMP_PLACES), no PE= in --map-by
#   jobscripts_test.sh signal BIN_DIR WORK     SIGTERM to mpirun_baremetal.sh, then SIGINT to its process group
#                                              (Ctrl-C): the ranks checkpoint and the script exits 3, both times
#   jobscripts_test.sh srun_tasks BIN_DIR WORK every sbatch script starts srun with the job's $SLURM_NTASKS ranks
#                                              (--ntasks), never --ntasks-per-node=1 when the job was asked for
#                                              with --ntasks alone (no SLURM_NTASKS_PER_NODE)
#   jobscripts_test.sh modules BIN_DIR WORK    HSDP_MODULES="a/1 b/2": every job script runs `module load a/1 b/2`
#                                              before its launcher; a failing `module load` is exit 2, no launch
#   jobscripts_test.sh headers BIN_DIR WORK    every sbatch header shows ##SBATCH --account= / --partition= lines
#                                              and a `# module load` line, all before the first command
#   jobscripts_test.sh study_array BIN_DIR WORK  study.sbatch's example `sbatch --array=...` line is the one
#                                              `hsdp-sweep expand input/study_quickstart.ini` prints, and its
#                                              header's default ranks are the study's np
#   jobscripts_test.sh study_rerun BIN_DIR WORK  study.sbatch resubmitted: a point that finished (exit_code 0 and
#                                              summary.json) is kept, srun not started, exit 0, its exit_code still
#                                              0; one that did not finish runs and records hsdp-train's exit
#   jobscripts_test.sh requeue_exit BIN_DIR WORK  train_requeue.sbatch requeues on hsdp-train's exit 3 (scontrol
#                                              requeue, script exit 0) and never on its exit 6 (stopped with no
#                                              checkpoint.dir: a requeue would start again from step 0): exit 6;
#                                              a SIGTERM to the batch shell reaches srun as SIGUSR1 (srun turns a
#                                              SIGTERM into SIGKILL for the tasks), and a step ended by it (138:
#                                              hsdp-train still loading) is requeued as exit 3; a SIGUSR1 during the
#                                              module loads requeues without starting the step; a failed
#                                              `scontrol requeue` is exit 3
#   jobscripts_test.sh site_env BIN_DIR WORK   every sbatch script: HDF5_USE_FILE_LOCKING=FALSE in the ranks'
#                                              environment (a value given is kept); srun --mpi from HSDP_SRUN_MPI
#                                              (default pmix, "" = none); without --cpus-per-task the node's CPUs
#                                              shared by its ranks (32 CPUs, 4 per node: 8 each); the train scripts
#                                              stripe a new HSDP_CKPT_DIR with lfs and pass it as checkpoint.dir;
#                                              train_gpu.sbatch runs build/bin/hsdp-train when there is no build-cuda
#   jobscripts_test.sh build BIN_DIR WORK      builds that run where they are deployed: a default configure has no
#                                              -march=native and no -Werror (x86-64-v3; -Werror with HSDP_WERROR=ON,
#                                              as tools/test.sh sets it), and tools/quickstart.sh builds exactly the
#                                              programs it runs (--target), no tests
#   jobscripts_test.sh setup BIN_DIR WORK      tools/setup.sh lists slurm-wlm, munge and shellcheck, each a package
#                                              apt knows, installed only with --tests (test.sh, not quickstart.sh)
#                                              and not where a site Slurm is on PATH; --tests --check finds
#                                              everything installed, within seconds
#
# BIN_DIR holds hsdp-train and hsdp-data (a build's bin/). Exit 77 = skipped, with the reason printed.
set -euo pipefail
check=$1 bin=$2 work=$3
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SKIP=77
rm -rf "$work"
mkdir -p "$work"
cd "$repo"

fail() { echo "FAIL: $*" >&2; exit 1; }

# A stand-in for hsdp-train that prints what binding and OpenMP settings each rank got.
write_probe() {
  cat >"$work/probe.sh" <<'EOF'
#!/usr/bin/env bash
echo "probe rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}} cpus=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status) omp_proc_bind=${OMP_PROC_BIND:-} omp_places=${OMP_PLACES:-}"
EOF
  chmod +x "$work/probe.sh"
}

# A fake srun (first on PATH) that writes its arguments, one a line, to $work/srun.args and exits 0.
write_fake_srun() {
  mkdir -p "$work/fake"
  cat >"$work/fake/srun" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$@" >"$work/srun.args"
EOF
  chmod +x "$work/fake/srun"
}

# A one-point study for study.sbatch: points.txt and its deck.
write_study() {
  mkdir -p "$work/study/point_0"
  cp input/quickstart.ini "$work/study/point_0/deck.ini"
  printf '# index\tdeck\tpoint\n0\tpoint_0/deck.ini\ttrain.lr=1e-3\n' >"$work/study/points.txt"
}

# Runs sbatch script $1 as Slurm would start its batch shell (environment from the caller), fake srun first on PATH.
run_sbatch() {
  local script=$1
  shift
  local args=(input/quickstart.ini)
  [[ $script == study.sbatch ]] && args=("$work/study")
  rm -f "$work/srun.args"
  # Whatever Slurm job this test itself may run in is not the one simulated: its SLURM_* go first.
  env -u SLURM_NTASKS -u SLURM_NTASKS_PER_NODE -u SLURM_JOB_NUM_NODES -u SLURM_CPUS_PER_TASK -u SLURM_GPUS_PER_NODE \
    -u SLURM_JOB_ID -u SLURM_RESTART_COUNT -u HSDP_ARGS -u HSDP_SRUN_ARGS -u HSDP_MODULES -u SLURM_CPUS_ON_NODE \
    -u SLURM_TASKS_PER_NODE -u HSDP_SRUN_MPI -u HSDP_CKPT_DIR -u HDF5_USE_FILE_LOCKING \
    PATH="$work/fake:$PATH" SLURM_SUBMIT_DIR="$repo" SLURM_ARRAY_TASK_ID=0 HSDP_TRAIN="$work/probe.sh" "$@" \
    bash "jobscripts/$script" "${args[@]}"
}

sbatch_scripts=(train.sbatch study.sbatch train_requeue.sbatch train_gpu.sbatch)

case $check in
unbind)
  command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed (tools/setup.sh installs openmpi-bin)"; exit $SKIP; }
  write_probe
  mine=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
  BIND_TO=none NP=2 MPIRUN_ARGS=--oversubscribe HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh \
    >"$work/none.out" 2>&1 || fail "mpirun_baremetal.sh failed: $(cat "$work/none.out")"
  grep '^probe' "$work/none.out"
  [[ $(grep -c '^probe' "$work/none.out") == 2 ]] || fail "expected 2 ranks: $(cat "$work/none.out")"
  while read -r line; do
    [[ $line == *" cpus=$mine "* ]] || fail "BIND_TO=none: a rank is bound ($line; this shell: $mine)"
    [[ $line == *" omp_proc_bind=false omp_places=" ]] || fail "BIND_TO=none: OpenMP still pins threads ($line)"
  done < <(grep '^probe' "$work/none.out")
  echo "BIND_TO=none: both ranks may run on CPUs $mine, OMP_PROC_BIND=false, no OMP_PLACES"
  dry=$(DRY_RUN=1 BIND_TO=none NP=2 THREADS=1 HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh)
  echo "dry run: $dry"
  [[ $dry == *"--bind-to none"* ]] || fail "no --bind-to none in: $dry"
  [[ $dry != *"PE="* ]] || fail "--map-by still asks for PE= (cores per rank, a binding) with BIND_TO=none: $dry"
  [[ $dry != *"--report-bindings"* ]] || fail "--report-bindings with BIND_TO=none: $dry"
  # A lost host: mpirun's daemon keepalive from HSDP_LOST_HOST_S (12 s: idle 4 s, then 4 probes 2 s apart), and
  # mpirun's exit code for a lost host (205) reported as hsdp's 4.
  dry=$(HSDP_LOST_HOST_S=12 DRY_RUN=1 NP=2 HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh)
  [[ $dry == *"--mca oob_tcp_keepalive_time 4 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 4"* ]] ||
    fail "no keepalive from HSDP_LOST_HOST_S=12 in: $dry"
  code=0
  HSDP_LOST_HOST_S=1 DRY_RUN=1 HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh >/dev/null 2>&1 || code=$?
  ((code == 2)) || fail "HSDP_LOST_HOST_S=1: exit $code, expected 2"
  printf '#!/bin/sh\necho "ORTE has lost communication with a remote daemon." >&2\nexit 205\n' >"$work/mpirun205.sh"
  chmod +x "$work/mpirun205.sh"
  code=0
  MPIRUN="$work/mpirun205.sh" HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh >"$work/lost.out" 2>&1 || code=$?
  { ((code == 4)) && grep -q "lost a host" "$work/lost.out"; } || fail "mpirun's 205 gave exit $code: $(cat "$work/lost.out")"
  echo "lost host: keepalive set from HSDP_LOST_HOST_S; mpirun's 205 is exit 4"
  # The contrast (on 2 or more CPUs): by default each rank is bound to one core, so the probe does see binding.
  if (($(nproc) >= 2)); then
    NP=2 MPIRUN_ARGS=--oversubscribe HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh >"$work/core.out" 2>&1 ||
      fail "mpirun_baremetal.sh (default binding) failed: $(cat "$work/core.out")"
    grep '^probe' "$work/core.out"
    ! grep '^probe' "$work/core.out" | grep -q " cpus=$mine " || fail "default BIND_TO=core: a rank is not bound"
    grep '^probe' "$work/core.out" | grep -q " omp_proc_bind=close omp_places=cores" || fail "default: no OMP binding"
    echo "default (BIND_TO=core): each rank on its own core, OMP_PROC_BIND=close OMP_PLACES=cores"
  fi
  ;;

signal)
  command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed (tools/setup.sh installs openmpi-bin)"; exit $SKIP; }
  "$bin/hsdp-data" synth --out-dir "$work/data" >/dev/null
  set -m # the script gets its own process group, as under an interactive shell, and SIGINT is not ignored
  for how in TERM INT; do
    out=$work/$how.out ckpt=$work/ckpt_$how log=$work/log_$how
    NP=2 MPIRUN_ARGS=--oversubscribe HSDP_TRAIN="$bin/hsdp-train" jobscripts/mpirun_baremetal.sh input/quickstart.ini \
      --data.train="$work/data/train.bin" --data.val="$work/data/val.bin" --data.entropy_json="$work/data/source.json" \
      --train.steps=5000 --train.eval_every=0 --log.every=10 --log.dir="$log" --checkpoint.dir="$ckpt" \
      --checkpoint.every=0 >"$out" 2>&1 &
    pid=$!
    # On a failure: the script's process group and mpirun's (setsid: a group of its own), found by parent PID.
    stop_job() {
      local child
      for child in $(pgrep -P "$pid"); do kill -KILL -- -"$child" 2>/dev/null || kill -KILL "$child" 2>/dev/null; done
      kill -KILL -- -"$pid" 2>/dev/null
    }
    for _ in $(seq 600); do
      [[ -f $log/metrics.jsonl && $(wc -l <"$log/metrics.jsonl") -ge 3 ]] && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    [[ -f $log/metrics.jsonl ]] || { stop_job; fail "no step logged: $(cat "$out")"; }
    if [[ $how == TERM ]]; then
      kill -TERM "$pid" # to the script alone, as `kill PID` or a scheduler does
    else
      kill -INT -- -"$pid" # to its whole process group, as Ctrl-C in a terminal does
    fi
    status=0
    timeout 120 tail --pid="$pid" -f /dev/null || { stop_job; fail "SIG$how: still running after 120 s"; }
    wait "$pid" || status=$?
    tail -n 4 "$out"
    ((status == 3)) || fail "SIG$how: exit $status, expected 3 (checkpointed): $(cat "$out")"
    [[ -f $ckpt/latest ]] || fail "SIG$how: no checkpoint in $ckpt"
    grep -q "asking the ranks to checkpoint" "$out" || fail "SIG$how: the script did not forward the signal"
    echo "SIG$how: exit 3, checkpoint $(cat "$ckpt/latest")"
  done
  left=$(pgrep -f -- "hsdp-train.*$work" || true)
  [[ -z $left ]] || fail "processes left behind: $(pgrep -af -- "hsdp-train.*$work")"
  ;;

srun_tasks)
  write_probe
  write_fake_srun
  write_study
  for script in "${sbatch_scripts[@]}"; do
    # Asked for with --ntasks alone (sbatch -n 6 --wrap, salloc -n 6): no SLURM_NTASKS_PER_NODE.
    run_sbatch "$script" SLURM_NTASKS=6 SLURM_JOB_NUM_NODES=2 >"$work/out" 2>&1 ||
      fail "$script: $(cat "$work/out")"
    [[ -f $work/srun.args ]] || fail "$script did not run srun: $(cat "$work/out")"
    grep -qx -- "--ntasks=6" "$work/srun.args" || fail "$script: srun without --ntasks=6: $(tr '\n' ' ' <"$work/srun.args")"
    ! grep -q -- "--ntasks-per-node" "$work/srun.args" ||
      fail "$script: srun gets a --ntasks-per-node the job did not ask for: $(tr '\n' ' ' <"$work/srun.args")"
    # Asked for with --ntasks=3 under the header's --ntasks-per-node=4 (a maximum then).
    run_sbatch "$script" SLURM_NTASKS=3 SLURM_NTASKS_PER_NODE=4 SLURM_JOB_NUM_NODES=1 >"$work/out" 2>&1 ||
      fail "$script: $(cat "$work/out")"
    grep -qx -- "--ntasks=3" "$work/srun.args" || fail "$script: srun without --ntasks=3: $(tr '\n' ' ' <"$work/srun.args")"
    echo "$script: srun --ntasks=\$SLURM_NTASKS (6 with --ntasks alone, 3 under the header's --ntasks-per-node=4)"
  done
  ;;

requeue_exit)
  write_probe
  for code in 3 6; do
    mkdir -p "$work/fake"
    printf '#!/usr/bin/env bash\nexit %s\n' "$code" >"$work/fake/srun"
    printf '#!/usr/bin/env bash\necho "scontrol $*" >>"%s"\n' "$work/scontrol.log" >"$work/fake/scontrol"
    chmod +x "$work/fake/srun" "$work/fake/scontrol"
    rm -f "$work/scontrol.log"
    status=0
    run_sbatch train_requeue.sbatch SLURM_JOB_ID=42 >"$work/out" 2>&1 || status=$?
    if ((code == 3)); then
      [[ $status == 0 && $(cat "$work/scontrol.log" 2>/dev/null) == "scontrol requeue 42" ]] ||
        fail "exit 3: script exit $status, scontrol calls: $(cat "$work/scontrol.log" 2>/dev/null); $(cat "$work/out")"
    else
      [[ $status == 6 && ! -e $work/scontrol.log ]] ||
        fail "exit 6: script exit $status, scontrol calls: $(cat "$work/scontrol.log" 2>/dev/null); $(cat "$work/out")"
      grep -q "stopped without a checkpoint (exit 6.*not requeueing" "$work/out" || fail "no line: $(cat "$work/out")"
    fi
    echo "hsdp-train exit $code: train_requeue.sbatch exit $status, $(cat "$work/scontrol.log" 2>/dev/null || echo 'no requeue')"
  done
  # SIGTERM to the batch shell: passed to srun as SIGUSR1 (srun would SIGKILL the tasks on a SIGTERM); the fake srun
  # records what it got and ends as a step whose hsdp-train died of it while loading (128 + 10): requeued as exit 3.
  printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$@" >"%s"\ntrap "echo USR1 >%s; exit 138" USR1\ntrap "echo TERM >%s; exit 143" TERM\nsleep 30 &\nwait\n' \
    "$work/srun.args" "$work/srun.signal" "$work/srun.signal" >"$work/fake/srun"
  chmod +x "$work/fake/srun"
  rm -f "$work/scontrol.log" "$work/srun.args" "$work/srun.signal"
  run_sbatch train_requeue.sbatch SLURM_JOB_ID=43 >"$work/out" 2>&1 &
  job=$!
  for _ in $(seq 100); do [[ -s $work/srun.args ]] && break; sleep 0.1; done
  # The batch shell itself, as Slurm signals it: the child of run_sbatch's background subshell (env execs bash).
  kill -TERM "$(pgrep -P "$job")"
  status=0
  wait "$job" || status=$?
  [[ $(cat "$work/srun.signal" 2>/dev/null) == USR1 ]] || fail "srun got '$(cat "$work/srun.signal" 2>/dev/null)', not USR1"
  [[ $status == 0 && $(cat "$work/scontrol.log" 2>/dev/null) == "scontrol requeue 43" ]] ||
    fail "SIGTERM while loading: script exit $status, scontrol calls: $(cat "$work/scontrol.log" 2>/dev/null); $(cat "$work/out")"
  grep -q "ended by the SIGUSR1 passed on for SIGTERM before it could take it" "$work/out" || fail "not said: $(cat "$work/out")"
  echo "SIGTERM: srun got SIGUSR1, the step ended by it (138) requeued: $(grep -o 'ended by the SIGUSR1.*' "$work/out" | cut -c1-80)"
  # SIGUSR1 while the modules load (before srun): requeued, the step never started.
  # shellcheck disable=SC2317  # the job script calls it (exported)
  module() { sleep 2; }
  export -f module
  rm -f "$work/scontrol.log" "$work/srun.args" "$work/srun.signal"
  run_sbatch train_requeue.sbatch SLURM_JOB_ID=44 HSDP_MODULES=slow/1 >"$work/out" 2>&1 &
  job=$!
  sleep 0.5
  kill -USR1 "$(pgrep -P "$job")"
  status=0
  wait "$job" || status=$?
  unset -f module
  [[ $status == 0 && ! -e $work/srun.args && $(cat "$work/scontrol.log" 2>/dev/null) == "scontrol requeue 44" ]] ||
    fail "SIGUSR1 during module loads: script exit $status, srun $( [[ -e $work/srun.args ]] && echo started || echo 'not started'), scontrol: $(cat "$work/scontrol.log" 2>/dev/null); $(cat "$work/out")"
  echo "SIGUSR1 during the module loads: requeued without starting the step"
  # A requeue that fails (the job submitted with --no-requeue): exit 3, said.
  printf '#!/usr/bin/env bash\nexit 3\n' >"$work/fake/srun"
  printf '#!/usr/bin/env bash\necho "scontrol: error: Requeue of job is not allowed" >&2\nexit 1\n' >"$work/fake/scontrol"
  status=0
  run_sbatch train_requeue.sbatch SLURM_JOB_ID=45 >"$work/out" 2>&1 || status=$?
  if [[ $status != 3 ]] || ! grep -q "scontrol requeue 45 failed" "$work/out"; then
    fail "failed requeue: exit $status; $(cat "$work/out")"
  fi
  echo "a failed scontrol requeue: exit 3"
  ;;

modules)
  write_probe
  write_fake_srun
  write_study
  # The module command as Lmod and Environment Modules define it: a shell function, exported to the job.
  module() { echo "module $*" >>"$MODULE_LOG"; [[ $* != *broken* ]]; }
  export -f module
  export MODULE_LOG=$work/module.log
  for script in "${sbatch_scripts[@]}" mpirun_baremetal.sh; do
    rm -f "$MODULE_LOG"
    if [[ $script == mpirun_baremetal.sh ]]; then
      HSDP_MODULES="hsdp-test/1.0 mpi/4.1" DRY_RUN=1 HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh \
        >"$work/out" 2>&1 || fail "$script: $(cat "$work/out")"
      grep -q "hsdp-train\|probe.sh" "$work/out" || fail "$script: no launch line: $(cat "$work/out")"
    else
      run_sbatch "$script" HSDP_MODULES="hsdp-test/1.0 mpi/4.1" >"$work/out" 2>&1 || fail "$script: $(cat "$work/out")"
      [[ -f $work/srun.args ]] || fail "$script did not run srun: $(cat "$work/out")"
    fi
    [[ -f $MODULE_LOG && $(cat "$MODULE_LOG") == "module load hsdp-test/1.0 mpi/4.1" ]] ||
      fail "$script: HSDP_MODULES not loaded (module calls: $(cat "$MODULE_LOG" 2>/dev/null))"
    # A module that does not load: exit 2, nothing launched.
    status=0
    if [[ $script == mpirun_baremetal.sh ]]; then
      HSDP_MODULES="broken/0" DRY_RUN=1 HSDP_TRAIN="$work/probe.sh" jobscripts/mpirun_baremetal.sh >"$work/out" 2>&1 ||
        status=$?
    else
      run_sbatch "$script" HSDP_MODULES="broken/0" >"$work/out" 2>&1 || status=$?
      [[ ! -f $work/srun.args ]] || fail "$script: srun ran although module load failed"
    fi
    ((status == 2)) || fail "$script: exit $status after a failing module load, expected 2: $(cat "$work/out")"
    grep -q "module load broken/0 failed" "$work/out" || fail "$script: no message naming the module: $(cat "$work/out")"
    echo "$script: module load hsdp-test/1.0 mpi/4.1 before the launch; a failing module load is exit 2"
  done
  ;;

headers)
  for script in "${sbatch_scripts[@]}"; do
    # The header: everything before the first line that is neither blank nor a comment (sbatch reads no
    # #SBATCH line after it).
    header=$(awk 'NR > 1 && !/^[[:space:]]*(#|$)/ { exit } { print }' "jobscripts/$script")
    for want in '^##SBATCH --account=' '^##SBATCH --partition='; do
      grep -q -- "$want" <<<"$header" || fail "$script: no '$want' line in the header"
    done
    [[ $(grep -c '^#SBATCH' "jobscripts/$script") == $(grep -c '^#SBATCH' <<<"$header") ]] ||
      fail "$script: #SBATCH lines after the first command (sbatch ignores them)"
    grep -q '^# module load ' "jobscripts/$script" || fail "$script: no '# module load' hook"
    echo "$script: header shows $(grep -o -- '--account=[^ ]*\|--partition=[^ ]*' <<<"$header" | tr '\n' ' ')and a module load hook"
  done
  grep -q '^# module load ' jobscripts/mpirun_baremetal.sh || fail "mpirun_baremetal.sh: no '# module load' hook"
  ;;

study_array)
  spec=input/study_quickstart.ini
  printed=$(tools/sweep/hsdp-sweep expand "$spec" --out "$work/study" --train "$bin/hsdp-train" | sed -n 's/^[[:space:]]*\(sbatch .*\)/\1/p' || true)
  [[ -n $printed ]] || fail "hsdp-sweep expand $spec printed no sbatch line"
  echo "hsdp-sweep expand prints: $printed"
  want=$(grep -o -- '--array=[^ ]*' <<<"$printed")
  example=$(grep -E '^#[[:space:]]+sbatch .*jobscripts/study\.sbatch' jobscripts/study.sbatch || true)
  [[ -n $example ]] || fail "study.sbatch shows no example sbatch line"
  echo "study.sbatch shows: $example"
  [[ $(grep -o -- '--array=[^ ]*' <<<"$example") == "$want" ]] ||
    fail "study.sbatch's example array ($(grep -o -- '--array=[^ ]*' <<<"$example")) is not the shipped study's ($want)"
  points=$(grep -vc '^#' "$work/study/points.txt")
  np=$(awk -F= '/^[[:space:]]*np[[:space:]]*=/ { gsub(/[[:space:]]/, "", $2); print $2 }' "$spec")
  per_node=$(awk -F= '/^#SBATCH --ntasks-per-node=/ { print $2 }' jobscripts/study.sbatch)
  nodes=$(awk -F= '/^#SBATCH --nodes=/ { print $2 }' jobscripts/study.sbatch)
  ((${per_node:-1} * ${nodes:-1} == np)) ||
    fail "study.sbatch's default ranks (${per_node:-1} x ${nodes:-1} nodes) are not the study's np = $np"
  echo "the shipped study: $points points ($want), np = $np = the header's default ranks"
  ;;

study_rerun)
  write_probe
  write_study
  point=$work/study/point_0
  mkdir -p "$work/fake"
  # hsdp-train refusing the point's log.dir, as it does a finished point's: exit 2.
  printf '#!/usr/bin/env bash\nprintf "%%s\\n" "$@" >"%s"\nexit 2\n' "$work/srun.args" >"$work/fake/srun"
  chmod +x "$work/fake/srun"
  status=0
  run_sbatch study.sbatch >"$work/out" 2>&1 || status=$?
  [[ $status == 2 && -f $work/srun.args && $(cat "$point/exit_code") == 2 ]] ||
    fail "a point not run before: exit $status, exit_code $(cat "$point/exit_code" 2>/dev/null); $(cat "$work/out")"
  echo 0 >"$point/exit_code"
  echo '{"final_loss": 1.0}' >"$point/summary.json"
  status=0
  run_sbatch study.sbatch >"$work/out" 2>&1 || status=$?
  [[ $status == 0 && ! -e $work/srun.args && $(cat "$point/exit_code") == 0 ]] ||
    fail "a finished point resubmitted: exit $status, srun $([[ -e $work/srun.args ]] && echo started || echo not started), exit_code $(cat "$point/exit_code"); $(cat "$work/out")"
  grep -q "point 0 finished earlier .*kept, not run again" "$work/out" || fail "not said: $(cat "$work/out")"
  # Not finished, so run: exit_code 3 (stopped with a checkpoint) beside a summary.json, and 0 without summary.json.
  for case in "3 summary.json" "0 none"; do
    read -r code summary <<<"$case"
    echo "$code" >"$point/exit_code"
    [[ $summary == none ]] && rm "$point/summary.json"
    status=0
    run_sbatch study.sbatch >"$work/out" 2>&1 || status=$?
    [[ $status == 2 && -f $work/srun.args && $(cat "$point/exit_code") == 2 ]] ||
      fail "exit_code $code, summary.json $summary: exit $status, exit_code $(cat "$point/exit_code"); $(cat "$work/out")"
  done
  echo "study.sbatch resubmitted: the finished point kept (srun not started, exit_code 0), an unfinished one run"
  ;;

site_env)
  write_probe
  mkdir -p "$work/fake"
  cat >"$work/fake/srun" <<EOF
#!/usr/bin/env bash
printf '%s\n' "\$@" >"$work/srun.args"
echo "HDF5_USE_FILE_LOCKING=\${HDF5_USE_FILE_LOCKING:-unset}" >"$work/srun.env"
EOF
  cat >"$work/fake/lfs" <<EOF
#!/usr/bin/env bash
echo "lfs \$*" >>"$work/lfs.log"
EOF
  chmod +x "$work/fake/srun" "$work/fake/lfs"
  write_study
  for script in "${sbatch_scripts[@]}"; do
    rm -f "$work/lfs.log"
    rm -rf "$work/ckpt_$script"
    run_sbatch "$script" SLURM_NTASKS=8 SLURM_NTASKS_PER_NODE=4 SLURM_CPUS_ON_NODE=32 \
      HSDP_CKPT_DIR="$work/ckpt_$script" >"$work/out" 2>&1 || fail "$script: $(cat "$work/out")"
    grep -qx "HDF5_USE_FILE_LOCKING=FALSE" "$work/srun.env" || fail "$script: $(cat "$work/srun.env") in the ranks"
    grep -qx -- "--mpi=pmix" "$work/srun.args" || fail "$script: no srun --mpi=pmix by default"
    if [[ $script != train_gpu.sbatch ]]; then
      grep -qx -- "--cpus-per-task=8" "$work/srun.args" ||
        fail "$script: 32 CPUs and 4 ranks per node, but $(grep -- --cpus-per-task "$work/srun.args")"
      grep -qx -- "--device.threads=8" "$work/srun.args" || fail "$script: device.threads is not 8"
    elif [[ ! -d $repo/build-cuda && -x $repo/build/bin/hsdp-train ]]; then
      run_sbatch "$script" HSDP_TRAIN= HSDP_CKPT_DIR="$work/ckpt_$script" >"$work/out" 2>&1 || fail "$script: $(cat "$work/out")"
      grep -qx "$repo/build/bin/hsdp-train" "$work/srun.args" ||
        fail "train_gpu.sbatch does not run build/bin/hsdp-train: $(tr '\n' ' ' <"$work/srun.args")"
    fi
    if [[ $script != study.sbatch ]]; then
      grep -qx -- "--checkpoint.dir=$work/ckpt_$script" "$work/srun.args" || fail "$script: HSDP_CKPT_DIR not passed"
      grep -qx "lfs setstripe --stripe-count -1 --stripe-size 16M $work/ckpt_$script" "$work/lfs.log" ||
        fail "$script: the new checkpoint directory was not striped: $(cat "$work/lfs.log" 2>/dev/null)"
    fi
    run_sbatch "$script" HSDP_SRUN_MPI=pmi2 HDF5_USE_FILE_LOCKING=TRUE >"$work/out" 2>&1 || fail "$script: $(cat "$work/out")"
    grep -qx -- "--mpi=pmi2" "$work/srun.args" || fail "$script: HSDP_SRUN_MPI=pmi2 is not srun --mpi=pmi2"
    grep -qx "HDF5_USE_FILE_LOCKING=TRUE" "$work/srun.env" || fail "$script: a given HDF5_USE_FILE_LOCKING was replaced"
    run_sbatch "$script" HSDP_SRUN_MPI= >"$work/out" 2>&1 || fail "$script: $(cat "$work/out")"
    ! grep -q -- "--mpi" "$work/srun.args" || fail "$script: HSDP_SRUN_MPI='' still passes --mpi"
    echo "$script: HDF5_USE_FILE_LOCKING=FALSE, --mpi from HSDP_SRUN_MPI, 8 cores per rank on a 32-CPU node of 4 ranks"
  done
  ;;

build)
  command -v cmake >/dev/null || { echo "SKIP: cmake not installed"; exit $SKIP; }
  for werror in OFF ON; do
    flags=()
    [[ $werror == ON ]] && flags=(-DHSDP_WERROR=ON)
    cmake -S . -B "$work/$werror" -DCMAKE_BUILD_TYPE=Release -DHSDP_CUDA=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
      "${flags[@]}" >"$work/$werror.log" 2>&1 || fail "configure: $(tail -5 "$work/$werror.log")"
    commands=$work/$werror/compile_commands.json
    total=$(grep -c '"file"' "$commands")
    ! grep -q -- "-march=native" "$commands" || fail "a default build compiles with -march=native"
    [[ $(grep -c -- "-march=x86-64-v3" "$commands") == "$total" ]] || fail "not every file is compiled for x86-64-v3"
    werrors=$(grep -c -- "-Werror" "$commands" || true)
    if [[ $werror == OFF ]]; then
      ((werrors == 0)) || fail "a default build has -Werror in $werrors of $total compile commands"
    else
      ((werrors > 0)) || fail "HSDP_WERROR=ON adds no -Werror"
    fi
    echo "configure (HSDP_WERROR=$werror): $total files for -march=x86-64-v3, $werrors with -Werror"
  done
  grep -q -- "-DHSDP_WERROR=ON" tools/test.sh || fail "tools/test.sh does not build with HSDP_WERROR=ON"
  built=$(grep -o -- "--target .*" tools/quickstart.sh | head -1 | cut -d' ' -f2- | tr ' ' '\n' | sort | paste -sd' ')
  # Every program it runs or names in its "what next" is built (hsdp-sweep and hsdp-selfcheck are links that
  # configuring makes, not targets).
  # shellcheck disable=SC2016  # the literal $build of the script
  ran=$(grep -o '$build/bin/[a-z-]*' tools/quickstart.sh | sed 's|.*/||' | grep -vx 'hsdp-sweep\|hsdp-selfcheck' |
    sort -u | paste -sd' ')
  missing=$(comm -13 <(tr ' ' '\n' <<<"$built") <(tr ' ' '\n' <<<"$ran") | paste -sd' ')
  [[ -n $built && -n $ran && -z $missing ]] ||
    fail "tools/quickstart.sh runs or names [$ran] but does not build [$missing] (it builds [$built])"
  echo "tools/quickstart.sh builds what it runs: $built"
  ;;

setup)
  packages=$(tools/setup.sh --print-packages)
  for p in slurm-wlm munge shellcheck; do
    grep -qx "$p" <<<"$packages" || fail "tools/setup.sh does not install $p (the slurm tests would skip without it)"
  done
  if command -v apt-cache >/dev/null; then
    # Every name is a real package of this distribution: apt-cache policy shows a candidate version for it.
    # shellcheck disable=SC2086  # one word per package
    known=$(apt-cache policy $packages 2>/dev/null | awk '/^[^ ].*:$/ { p = substr($1, 1, length($1) - 1) }
      /^  Candidate: / && $2 != "(none)" { print p }')
    for p in $packages; do
      grep -qx "$p" <<<"$known" || fail "apt-cache policy $p: no candidate (tools/setup.sh names a package apt does not have)"
    done
    echo "apt-cache policy: a candidate for each of the $(wc -w <<<"$packages") packages of tools/setup.sh"
  fi
  started=$(date +%s%N)
  tools/setup.sh --tests --check || fail "tools/setup.sh --tests --check: something is missing; run tools/setup.sh --tests"
  ms=$((($(date +%s%N) - started) / 1000000))
  echo "tools/setup.sh --check: everything installed ($ms ms)"
  ((ms < 10000)) || fail "tools/setup.sh --check took $ms ms: it should only ask dpkg-query"
  # The Slurm and munge packages are for the tests only, and never onto a site's own Slurm. A fake dpkg-query says
  # every package is installed except those in $NOT_INSTALLED; a fake sinfo on PATH is a site Slurm.
  mkdir -p "$work/fake" "$work/site"
  cat >"$work/fake/dpkg-query" <<'FAKE'
#!/usr/bin/env bash
if [[ $1 == -S ]]; then  # owner of a file: none for the fake site Slurm
  [[ $2 == */site/* ]] && exit 1
  echo "slurm-client: $2"
  exit 0
fi
for p in "$@"; do
  [[ $p == -* ]] && continue
  if [[ " $NOT_INSTALLED " == *" $p "* ]]; then echo "$p deinstall ok config-files"; else echo "$p install ok installed"; fi
done
FAKE
  printf '#!/bin/sh\nexit 0\n' >"$work/site/sinfo"
  chmod +x "$work/fake/dpkg-query" "$work/site/sinfo"
  grep -qx "tools/setup.sh --tests" tools/test.sh || fail "tools/test.sh does not run tools/setup.sh --tests"
  grep -qx "tools/setup.sh" tools/quickstart.sh || fail "tools/quickstart.sh does not run tools/setup.sh (without --tests)"
  NOT_INSTALLED="slurm-wlm munge" PATH="$work/fake:$PATH" tools/setup.sh --check ||
    fail "tools/setup.sh --check wants slurm-wlm or munge, which only the tests need"
  out=$(NOT_INSTALLED="slurm-wlm munge" PATH="$work/fake:$PATH" tools/setup.sh --tests --check 2>&1) &&
    fail "tools/setup.sh --tests --check did not miss slurm-wlm and munge"
  grep -q "missing slurm-wlm munge" <<<"$out" || fail "tools/setup.sh --tests --check: $out"
  out=$(NOT_INSTALLED="slurm-wlm munge" PATH="$work/fake:$work/site:$PATH" tools/setup.sh --tests --check 2>&1) ||
    fail "with a site Slurm, tools/setup.sh --tests --check still wants slurm-wlm or munge: $out"
  grep -qF "a site Slurm is installed ($work/site/sinfo, not from a Debian package): not installing" <<<"$out" ||
    fail "the site Slurm is not said: $out"
  echo "tools/setup.sh: slurm-wlm and munge only with --tests (test.sh), never beside a site Slurm: $out"
  ;;

*)
  fail "unknown check '$check'"
  ;;
esac
echo "$check: ok"
