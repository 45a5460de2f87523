#!/usr/bin/env bash
# Faults on one rank of 4 (2 emulated nodes x 2), in every phase of a run (issues 15 and 17). Injected through
# HSDP_FAULT (include/hsdp/core/fault.hpp). One check per call, each against a good checkpoint made first:
#
#   faults.sh fail  TRAIN DECK DATA RUN MPIEXEC...   an error on rank 2 at start-up, data, resume, step, eval,
#                                                    checkpoint, shutdown and (zero1) building the model ends all
#                                                    ranks with exit 2 within
#                                                    seconds (well before any watchdog), the error said exactly once
#   faults.sh good ...                               the fixture: a checkpoint at step 2 (4 ranks) in RUN/good
#   faults.sh stall ...                              rank 1 stopped (SIGSTOP) at start-up (rank 0 says it waits,
#                                                    every comm.startup_timeout_s / 4), in a resume read, while
#                                                    rank 0 checks the run's record, in a checkpoint write and at
#                                                    shutdown (a step's collectives: the comm_watchdog tests), and
#                                                    rank 0 slow writing summary.json: exit 4 within
#                                                    timeout + 10 s, with one diagnosis naming the phase
#   faults.sh signal ...                             SIGUSR1 to every rank during start-up: exit 3 before the first
#                                                    step, no checkpoint written (fresh and resumed runs)
#   faults.sh bad_input ...                          checkpoint.dir a file or /dev/null, --config without its
#                                                    argument, -train.steps=3, device.threads beyond the node's
#                                                    hardware threads: exit 2, one line from rank 0, no step taken
#   faults.sh diverge ...                            a learning rate that makes the loss non-finite: exit 5 and one
#                                                    line from rank 0 naming the step and the last finite loss; the
#                                                    same with qgZ (bf16), whose quantizer meets the non-finite
#                                                    gradients
#   faults.sh full_log ...                           log.dir on a full tmpfs: said once, training goes on, the
#                                                    summary that cannot be written is exit 2, the earlier
#                                                    segment's summary.json kept (skipped, exit 77,
#                                                    where mounting a tmpfs is not allowed)
#   faults.sh read_only ...                          checkpoint.dir on a read-only file system: exit 2 at start-up,
#                                                    one line naming it, no step taken (skipped, exit 77, where
#                                                    mounting a tmpfs is not allowed)
#   faults.sh full_disk ...                          checkpoint.dir on a tmpfs too small for the second checkpoint:
#                                                    one line naming checkpoint.dir and the bytes needed, exit 2
#                                                    (on_error=stop) or the run goes on (on_error=continue)
#                                                    and the tools onto the full tmpfs (export, encode, consolidate,
#                                                    import --format hf): exit 2 naming the file, nothing left; a
#                                                    disk that fills during a save (tools, 4 ranks): the reserved
#                                                    file is written whole; unreserved, the loss is found, nothing left
#                                                    (skipped, exit 77, where mounting a tmpfs is not allowed)
#
# Every check works on its own copy of the fixture, whose file and `latest` must stay byte-identical.
set -euo pipefail
check=$1 train=$2 deck=$3 data=$4 run=$5
shift 5
mpiexec=("$@")
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --log.every=100 --device.threads=1 --topology.ranks_per_node=2 --train.eval_tokens=1024)
if [[ $check == good ]]; then  # the fixture every check starts from: a checkpoint at step 2 written by 4 ranks
  rm -rf "$run/good" "$run/log0" && mkdir -p "$run"
  "${mpiexec[@]}" "$train" "${common[@]}" --train.steps=2 --train.eval_every=0 --log.dir="$run/log0" \
    --checkpoint.dir="$run/good" >/dev/null
  exit 0
fi
[[ -f $run/good/latest ]] || { echo "no good checkpoint in $run/good: run 'faults.sh good' first"; exit 1; }
good=$run/$check/good
run=$run/$check
rm -rf "$run" && mkdir -p "$run"
cp -r "$run/../good" "$good"
fingerprint() { (cd "$good" && sha256sum step_2.h5 latest); }
before=$(fingerprint)

fail() { echo "FAIL: $*"; exit 1; }
unchanged() {  # the good checkpoint and `latest` are as they were
  [[ $(fingerprint) == "$before" ]] || fail "$1: the good checkpoint or latest changed"
}
kept() {  # after a fault at point $1: at shutdown the run has saved step 4 (`latest` names it), else nothing changed
  if [[ $1 == shutdown ]]; then
    [[ $(grep step_2.h5 <<<"$before") == $(cd "$good" && sha256sum step_2.h5) ]] || fail "shutdown: step_2.h5 changed"
    rm -f "$good/step_4.h5" && echo step_2.h5 >"$good/latest"
  fi
  unchanged "$1"
}
# launch NAME LIMIT_S ENV -- ARGS: runs the job under `timeout`; sets code, seconds; stderr in $run/NAME.err
launch() {
  local name=$1 limit=$2 env=$3
  shift 4
  local start=$SECONDS
  set +e
  env $env timeout -k 5 "$limit" "${mpiexec[@]}" "$train" "${common[@]}" --log.dir="$run/$name" "$@" \
    >"$run/$name.out" 2>"$run/$name.err"
  code=$?
  set -e
  seconds=$((SECONDS - start))
}
# Lines hsdp-train itself wrote on stderr (mpirun adds its own report of the abort).
own_lines() { grep -E "^(hsdp-train: |\[rank [0-9]+@)" "$run/$1.err" || true; }

case $check in
  fail)
    for point in startup data resume step eval checkpoint shutdown; do
      launch "$point" 60 "HSDP_FAULT=fail:$point@2" -- --train.steps=4 --train.eval_every=3 \
        --checkpoint.dir="$good" --checkpoint.resume=auto --comm.timeout_s=40 --checkpoint.timeout_s=40
      [[ $code -eq 2 ]] || { cat "$run/$point.err"; fail "$point: exit $code, expected 2"; }
      ((seconds <= 20)) || fail "$point: took $seconds s (the failure was not agreed; a watchdog ended it?)"
      said=$(grep -c "injected fault at '$point' on rank 2" "$run/$point.err" || true)
      [[ $said -eq 1 ]] || { cat "$run/$point.err"; fail "$point: the error is said $said times, expected once"; }
      [[ $(own_lines "$point" | wc -l) -eq 1 ]] || { cat "$run/$point.err"; fail "$point: more than one line"; }
      kept "$point"
      echo "fail at $point: exit 2 in $seconds s: $(own_lines "$point")"
    done
    # One rank failing to build its model under zero1, whose engine gathers the full parameters: the others build
    # theirs without that collective and fail with it (before, they waited in the gather until comm.timeout_s).
    launch model 60 "HSDP_FAULT=fail:model@2" -- --train.steps=4 --train.eval_every=0 --parallel.sharding=zero1 \
      --checkpoint.dir="$run/model_ckpt" --checkpoint.resume=none --comm.timeout_s=40
    [[ $code -eq 2 ]] || { cat "$run/model.err"; fail "model: exit $code, expected 2"; }
    ((seconds <= 20)) || fail "model: took $seconds s (a watchdog ended it?)"
    [[ $(own_lines model | wc -l) -eq 1 ]] || { cat "$run/model.err"; fail "model: not one line"; }
    grep -q "injected fault at 'model' on rank 2" "$run/model.err" || { cat "$run/model.err"; fail "model: not said"; }
    echo "fail at model (zero1): exit 2 in $seconds s: $(own_lines model)"
    ;;
  stall)
    timeout_s=5
    for point in startup resume record checkpoint shutdown; do
      launch "$point" 60 "HSDP_FAULT=stop:$point@1" -- --train.steps=4 --train.eval_every=0 \
        --checkpoint.dir="$good" --checkpoint.resume=auto --comm.timeout_s=$timeout_s --checkpoint.timeout_s=$timeout_s \
        --comm.startup_timeout_s=$timeout_s
      [[ $code -eq 4 ]] || { cat "$run/$point.err"; fail "$point: exit $code, expected 4"; }
      ((seconds <= timeout_s + 10)) || fail "$point: took $seconds s, more than timeout + 10 s"
      diagnosis=$(own_lines "$point" | head -1)
      case $point in
        startup) phase="start-up" ;;
        resume | record) phase="resume" ;;
        checkpoint) phase="checkpoint save of step 4" ;;
        shutdown) phase="during shutdown" ;;
      esac
      grep -qF "$phase" <<<"$diagnosis" || { cat "$run/$point.err"; fail "$point: the diagnosis does not name '$phase'"; }
      if [[ $point == startup ]]; then  # the wait is not silent: rank 0 says it every timeout / 4 s
        notice=$(grep -m1 "^hsdp: start-up: still .* after [0-9]* s (a rank that has not arrived" "$run/$point.err") ||
          { cat "$run/$point.err"; fail "startup: rank 0 waited without a word"; }
        echo "  $notice"
      fi
      kept "$point"
      echo "rank 1 stopped at $point: exit 4 in $seconds s: $diagnosis"
    done
    # Rank 0 slow in writing summary.json while the others wait in MPI_Finalize: its own stall watch ends the job.
    launch summary 60 "HSDP_FAULT=sleep=30:summary@0" -- --train.steps=4 --train.eval_every=0 \
      --checkpoint.dir="$good" --checkpoint.resume=auto --comm.timeout_s=$timeout_s
    [[ $code -eq 4 ]] || { cat "$run/summary.err"; fail "summary: exit $code, expected 4"; }
    ((seconds <= timeout_s + 10)) || fail "summary: took $seconds s, more than timeout + 10 s"
    grep -qF "shutdown: writing" "$run/summary.err" || { cat "$run/summary.err"; fail "summary: no diagnosis"; }
    kept shutdown
    echo "rank 0 slow writing summary.json: exit 4 in $seconds s: $(own_lines summary | head -1)"
    # Start-up has its own limit: a comm.timeout_s shorter than a (slow, here 3 s) start-up trips nothing.
    launch slow_startup 60 "HSDP_FAULT=sleep=3:startup@all" -- --train.steps=2 --train.eval_every=0 \
      --checkpoint.dir="$run/slow_ckpt" --checkpoint.resume=none --comm.timeout_s=1
    [[ $code -eq 0 ]] || { cat "$run/slow_startup.err"; fail "a 3 s start-up with comm.timeout_s=1: exit $code"; }
    echo "a 3 s start-up with comm.timeout_s=1: exit 0 in $seconds s (comm.startup_timeout_s bounds start-up)"
    ;;
  signal)
    for mode in fresh resumed; do
      if [[ $mode == fresh ]]; then
        args=(--checkpoint.dir="$run/fresh_ckpt" --checkpoint.resume=none)
      else
        args=(--checkpoint.dir="$good" --checkpoint.resume=auto)
      fi
      # Every rank sleeps 4 s at start-up; SIGUSR1 reaches every rank 2 s in.
      marker="$run/$mode"
      ( sleep 2; pkill -USR1 -f -- "^[^ ]*hsdp-train .*--log.dir=$marker( |$)" ) &
      launch "$mode" 60 "HSDP_FAULT=sleep=4:startup@all" -- --train.steps=4 --train.eval_every=0 "${args[@]}"
      wait
      [[ $code -eq 3 ]] || { cat "$run/$mode.err" "$run/$mode.out"; fail "$mode: exit $code, expected 3"; }
      grep -q "before the first step" "$run/$mode.out" || { cat "$run/$mode.out"; fail "$mode: no stop message"; }
      [[ ! -e $run/fresh_ckpt/latest ]] || fail "$mode: a checkpoint was written"
      unchanged "$mode"
      echo "SIGUSR1 during start-up ($mode): exit 3: $(grep "before the first step" "$run/$mode.out")"
    done
    ;;
  diverge)
    launch diverge 60 "" -- --train.steps=6 --train.eval_every=0 --train.lr=1e9 --train.min_lr=0 \
      --train.weight_decay=0 --train.warmup_steps=0 --checkpoint.dir="$good" --checkpoint.resume=auto
    [[ $code -eq 5 ]] || { cat "$run/diverge.err"; fail "diverge: exit $code, expected 5"; }
    line=$(own_lines diverge)
    [[ $(wc -l <<<"$line") -eq 1 && $line == "hsdp-train: training diverged at step "* ]] ||
      { cat "$run/diverge.err"; fail "diverge: expected one line from rank 0"; }
    grep -Eq "last finite loss .* at step [0-9]+\).*\(the last, step 2, is kept as it was\)" <<<"$line" || fail "diverge: $line"
    unchanged diverge
    echo "diverged: exit 5: $line"
    # The same under qgZ (bf16, 2 nodes), whose gradients are quantized: non-finite ones end the run the same way
    # (before, quantizing them threw on the ranks that held them: an internal error, not a divergence).
    launch diverge_qgz 60 "" -- --train.steps=6 --train.eval_every=0 --train.lr=1e9 --train.min_lr=0 \
      --train.weight_decay=0 --train.warmup_steps=0 --parallel.sharding=full_shard --precision.param=bf16 \
      --precision.reduce=bf16 --zeropp.quantized_gradients=true --checkpoint.dir="$run/qgz_ckpt" --checkpoint.resume=none
    [[ $code -eq 5 ]] || { cat "$run/diverge_qgz.err"; fail "diverge (qgZ): exit $code, expected 5"; }
    line=$(own_lines diverge_qgz)
    [[ $(wc -l <<<"$line") -eq 1 && $line == "hsdp-train: training diverged at step "* ]] ||
      { cat "$run/diverge_qgz.err"; fail "diverge (qgZ): expected one line from rank 0"; }
    echo "diverged under qgZ: exit 5: $line"
    ;;
  full_disk)
    mnt=$run/tmpfs
    mkdir -p "$mnt"
    mount -t tmpfs -o size=16m tmpfs "$mnt" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here (not root, or no permission)"; exit 77; }
    trap 'umount "$mnt" 2>/dev/null || true' EXIT
    # One checkpoint of the quickstart model is ~10 MiB: the first fits, the second does not.
    launch stop 120 "" -- --train.steps=4 --checkpoint.every=2 --train.eval_every=0 --checkpoint.dir="$mnt/ck" \
      --checkpoint.resume=none
    [[ $code -eq 2 ]] || { cat "$run/stop.err"; fail "full disk, on_error=stop: exit $code, expected 2"; }
    line=$(own_lines stop)
    [[ $(wc -l <<<"$line") -eq 1 ]] || { cat "$run/stop.err"; fail "full disk: more than one line"; }
    grep -q "checkpoint.dir '$mnt/ck': cannot write step_4.h5 (it needs at least .* MiB; .* MiB are free)" <<<"$line" ||
      fail "full disk: $line"
    [[ $(cat "$mnt/ck/latest") == step_2.h5 && -f $mnt/ck/step_2.h5 && ! -e $mnt/ck/step_4.h5.tmp ]] ||
      fail "full disk: latest, step_2.h5 or the temporary file is not as it should be: $(ls "$mnt/ck")"
    sha_before=$(sha256sum "$mnt/ck/step_2.h5")
    echo "full disk, on_error=stop: exit 2: $line"
    cp "$mnt/ck/step_2.h5" "$run/step_2.copy"
    launch continue 120 "" -- --train.steps=6 --checkpoint.every=2 --train.eval_every=0 --checkpoint.dir="$mnt/ck" \
      --checkpoint.resume=auto --checkpoint.on_error=continue
    [[ $code -eq 0 ]] || { cat "$run/continue.err"; fail "full disk, on_error=continue: exit $code, expected 0"; }
    [[ $(grep -c "training goes on" "$run/continue.err") -eq 1 ]] || { cat "$run/continue.err"; fail "continue: not said once"; }
    [[ $(sha256sum "$mnt/ck/step_2.h5") == "$sha_before" && $(cat "$mnt/ck/latest") == step_2.h5 ]] ||
      fail "continue: the previous checkpoint changed"
    grep -q '"steps":6' "$run/continue/summary.json" || fail "continue: the run did not finish"
    echo "full disk, on_error=continue: exit 0, 6 steps: $(grep "training goes on" "$run/continue.err" | cut -c1-160)..."
    # hsdp-ckpt export onto the full file system: exit 2 naming the file, and no .tmp left behind.
    head -c 100M /dev/zero >"$mnt/filler" 2>/dev/null || true
    set +e
    "$(dirname "$train")/hsdp-ckpt" export "$good/step_2.h5" --format safetensors --output "$mnt/model.safetensors" \
      >"$run/export.out" 2>"$run/export.err"
    code=$?
    set -e
    [[ $code -eq 2 ]] || { cat "$run/export.err"; fail "export onto a full disk: exit $code, expected 2"; }
    grep -q "model.safetensors.tmp': write failed: No space left on device" "$run/export.err" ||
      { cat "$run/export.err"; fail "export onto a full disk: no line naming the file"; }
    [[ ! -e $mnt/model.safetensors.tmp && ! -e $mnt/model.safetensors ]] ||
      fail "export onto a full disk left $(ls "$mnt" | grep model)"
    echo "export onto a full disk: exit 2, nothing left: $(head -n 1 "$run/export.err" | cut -c1-160)"
    head -c 300000 /dev/zero | tr '\0' x >"$run/text.txt"
    set +e
    "$(dirname "$train")/hsdp-data" encode --input "$run/text.txt" --output "$mnt/t.bin" >/dev/null 2>"$run/encode.err"
    code=$?
    set -e
    [[ $code -eq 2 && ! -e $mnt/t.bin.tmp && ! -e $mnt/t.bin ]] &&
      grep -q "cannot write '$mnt/t.bin.tmp': No space left on device" "$run/encode.err" ||
      { cat "$run/encode.err"; fail "hsdp-data encode onto a full disk: exit $code, left $(ls "$mnt" | grep t.bin)"; }
    echo "hsdp-data encode onto a full disk: exit 2, nothing left: $(head -n 1 "$run/encode.err")"
    # hsdp-ckpt consolidate and import --format hf onto the full file system: exit 2 naming the file and the space,
    # nothing left (they crashed with SIGSEGV at MPI_Finalize, leaving their .tmp).
    ckpt_tool=$(dirname "$train")/hsdp-ckpt
    "$ckpt_tool" export "$good/step_2.h5" --format hf --output "$run/hf" >/dev/null
    for command in "consolidate $good/step_2.h5" "import --format hf $run/hf"; do
      set +e
      # shellcheck disable=SC2086 # the command and its arguments, one word each
      "$ckpt_tool" $command --output "$mnt/tool.h5" >"$run/tool.out" 2>"$run/tool.err"
      code=$?
      set -e
      [[ $code -eq 2 ]] || { cat "$run/tool.err"; fail "hsdp-ckpt ${command%% *} onto a full disk: exit $code, expected 2"; }
      grep -q "cannot write '$mnt/tool.h5': it needs at least [0-9]* MiB for its tensors and [0-9]* MiB are free" \
        "$run/tool.err" || { cat "$run/tool.err"; fail "hsdp-ckpt ${command%% *}: no line naming the file and the space"; }
      [[ ! -e $mnt/tool.h5.tmp && ! -e $mnt/tool.h5 ]] || fail "hsdp-ckpt ${command%% *} left $(ls "$mnt" | grep tool)"
      echo "hsdp-ckpt ${command%% *} onto a full disk: exit 2, nothing left: $(head -n 1 "$run/tool.err" | cut -c1-140)"
    done
    # A disk that fills while the file is written, after the free-space check passed (HSDP_FAULT holds rank 0 after
    # the metadata, before the data; the test fills the disk then). The writer reserved the file's blocks when it
    # created it, so the tools and hsdp-train write it whole; where the file system cannot reserve them
    # (HSDP_CKPT_RESERVE=0), the write fails, and the file is closed and removed, naming it (they crashed with SIGSEGV
    # at MPI_Finalize, HDF5 closing a file whose close had failed, leaving the .tmp). Open MPI's shared file pointer
    # through a lock file (what it takes between nodes) is asked for, to see that a failed save leaves no .lock.
    export OMPI_MCA_sharedfp=lockedfile
    fill_when() {  # fill_when PATH RESERVE ROOM: once PATH holds its reserved blocks (or, without, 1 s after it
      # appears), takes all but ROOM KiB of the tmpfs
      for _ in $(seq 400); do [[ -e $1 ]] && { [[ $2 == 0 ]] || (($(stat -c %b "$1") > 2048)); } && break; sleep 0.05; done
      [[ -e $1 ]] || fail "$1 never appeared"
      [[ $2 == 1 ]] || sleep 1
      head -c 100M /dev/zero >"$mnt/filler" 2>/dev/null || true
      truncate -s "-$3K" "$mnt/filler"
    }
    for reserve in 1 0; do
      rm -rf "${mnt:?}"/*
      for command in "consolidate $good/step_2.h5" "import --format hf $run/hf"; do
        rm -f "$mnt/filler" "$mnt/tool.h5"
        set +e
        # shellcheck disable=SC2086 # the command and its arguments, one word each
        HSDP_CKPT_RESERVE=$reserve HSDP_FAULT=sleep=2:checkpoint@0 timeout -k 5 60 "$ckpt_tool" $command \
          --output "$mnt/tool.h5" >"$run/tool.out" 2>"$run/tool.err" &
        pid=$!
        fill_when "$mnt/tool.h5.tmp" $reserve 64
        wait "$pid"
        code=$?
        set -e
        what="hsdp-ckpt ${command%% *}, disk filled while writing (HSDP_CKPT_RESERVE=$reserve)"
        if [[ $reserve == 1 ]]; then
          [[ $code -eq 0 ]] || { cat "$run/tool.err"; fail "$what: exit $code, expected 0"; }
          "$ckpt_tool" verify "$mnt/tool.h5" >/dev/null || fail "$what: the file does not verify"
          echo "$what: exit 0, the file verifies"
        else
          [[ $code -eq 2 ]] || { cat "$run/tool.err"; fail "$what: exit $code, expected 2"; }
          grep -q "^hsdp-ckpt: error: cannot write '$mnt/tool.h5': " "$run/tool.err" ||
            { cat "$run/tool.err"; fail "$what: no line naming the file"; }
          [[ -z $(ls "$mnt" | grep tool) ]] || fail "$what: left $(ls "$mnt" | grep tool)"
          echo "$what: exit 2, nothing left: $(grep '^hsdp-ckpt' "$run/tool.err" | cut -c1-140)"
        fi
      done
      rm -rf "$mnt/filler" "$mnt/tool.h5" "$mnt/mid"
      set +e
      env HSDP_CKPT_RESERVE=$reserve HSDP_FAULT=sleep=2:checkpoint@0 timeout -k 5 120 "${mpiexec[@]}" "$train" \
        "${common[@]}" --log.dir="$run/mid$reserve" --train.steps=4 --checkpoint.every=2 --train.eval_every=0 \
        --checkpoint.dir="$mnt/mid" --checkpoint.resume=none --checkpoint.on_error=continue \
        >"$run/mid$reserve.out" 2>"$run/mid$reserve.err" &
      pid=$!
      # (with the reservation, no byte left; without, 64 KiB: the close of a file on a disk without a free block
      # can wait in Open MPI's lock file until checkpoint.timeout_s)
      fill_when "$mnt/mid/step_2.h5.tmp" $reserve $((64 * (1 - reserve)))
      wait "$pid"
      code=$?
      set -e
      what="4 ranks, disk filled while step_2.h5 is written (HSDP_CKPT_RESERVE=$reserve), on_error=continue"
      [[ $code -eq 0 ]] || { cat "$run/mid$reserve.err"; fail "$what: exit $code, expected 0"; }
      grep -q '"steps":4' "$run/mid$reserve/summary.json" || fail "$what: the run did not finish"
      line=$(grep "training goes on" "$run/mid$reserve.err" || true)
      [[ $(wc -l <<<"$line") -eq 1 ]] || { cat "$run/mid$reserve.err"; fail "$what: not said once: $line"; }
      [[ -z $(ls "$mnt/mid" | grep -E "\.tmp|\.lock") ]] || fail "$what: left $(ls "$mnt/mid")"
      if [[ $reserve == 1 ]]; then  # step_2.h5 whole (its reservation past the end, given back, holds `latest`);
        # step 4 finds the disk full before it starts
        [[ $line == *"cannot write step_4.h5"* && $(cat "$mnt/mid/latest") == step_2.h5 ]] || fail "$what: $line"
        rm -f "$mnt/filler"  # (with no free block, Open MPI's lock file keeps even a reader from opening it)
        "$ckpt_tool" verify "$mnt/mid/step_2.h5" >/dev/null || fail "$what: step_2.h5 does not verify"
      else  # the data the file system refused: found by reading it back (Open MPI did not report it)
        [[ $line == *"cannot write step_2.h5"*"read back differs"* ]] || fail "$what: $line"
      fi
      echo "$what: exit 0, 4 steps: ${line:0:200}..."
    done
    unset OMPI_MCA_sharedfp
    ;;
  full_log)
    # log.dir on a full file system: one warning when metrics.jsonl stops taking lines, training goes on to the end
    # (the checkpoints elsewhere hold the model), and the summary that cannot be written is one line and exit 2
    # (it used to be exit 0 with metrics.jsonl cut and summary.json empty, without a word). The run resumes one of 20
    # steps whose summary.json must stay as it was, no temporary file left (it was rewritten in place: truncated, then
    # cut where the disk ended when the new one did not fit in the old one's blocks).
    mnt=$run/logfs
    mkdir -p "$mnt"
    mount -t tmpfs -o size=64k tmpfs "$mnt" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here (not root, or no permission)"; exit 77; }
    trap 'umount "$mnt" 2>/dev/null || true' EXIT
    full_log=(--log.dir="$mnt/log" --train.eval_every=0 --log.every=1 --checkpoint.dir="$run/full_log_ck"
              --checkpoint.every=20)
    "${mpiexec[@]}" "$train" "${common[@]}" "${full_log[@]}" --train.steps=20 --checkpoint.resume=none \
      >"$run/full_log_first.out" 2>&1 || { cat "$run/full_log_first.out"; fail "full log.dir: the first 20 steps"; }
    summary_before=$(sha256sum "$mnt/log/summary.json")
    set +e
    timeout -k 5 120 "${mpiexec[@]}" "$train" "${common[@]}" "${full_log[@]}" --train.steps=60 \
      >"$run/full_log.out" 2>"$run/full_log.err" &
    pid=$!
    for _ in $(seq 200); do (($(wc -l <"$mnt/log/metrics.jsonl") > 20)) && break; sleep 0.05; done
    head -c 100000 /dev/zero >"$mnt/filler" 2>/dev/null  # the rest of the 64 KiB
    wait "$pid"
    code=$?
    set -e
    [[ $code -eq 2 ]] || { cat "$run/full_log.err"; fail "full log.dir: exit $code, expected 2"; }
    [[ $(grep -c "cannot write '$mnt/log/metrics.jsonl'" "$run/full_log.out" "$run/full_log.err" | awk -F: '{ s += $2 } END { print s }') -eq 1 ]] ||
      { cat "$run/full_log.out" "$run/full_log.err"; fail "full log.dir: the metrics failure not said exactly once"; }
    grep -q "log.dir: cannot write '$mnt/log/summary.json' after 60 steps (final loss .*; cannot write '$mnt/log/summary.json.tmp': No space left on device)" "$run/full_log.err" ||
      { cat "$run/full_log.err"; fail "full log.dir: the summary failure not said"; }
    [[ $(sha256sum "$mnt/log/summary.json") == "$summary_before" ]] || fail "full log.dir: the first run's summary.json changed"
    [[ ! -e $mnt/log/summary.json.tmp ]] || fail "full log.dir: summary.json.tmp left behind"
    [[ -f $run/full_log_ck/step_60.h5 ]] || fail "full log.dir: training did not go on to its checkpoint at step 60"
    echo "full log.dir: exit 2 after 60 steps, step_60.h5 written, the earlier summary.json kept: $(grep -h "cannot write" "$run/full_log.out" "$run/full_log.err" | cut -c1-160 | head -2 | paste -sd'|')"
    ;;
  read_only)
    # A checkpoint.dir that exists but cannot be written (here a tmpfs remounted read-only): exit 2 at start-up, one
    # line naming it, before any step (it used to be found by the first save, checkpoint.every steps later).
    mnt=$run/ro
    mkdir -p "$mnt"
    mount -t tmpfs -o size=1m tmpfs "$mnt" 2>/dev/null || { echo "SKIP: cannot mount a tmpfs here (not root, or no permission)"; exit 77; }
    trap 'umount "$mnt" 2>/dev/null || true' EXIT
    mkdir -p "$mnt/ck"
    mount -o remount,ro "$mnt" || fail "cannot remount $mnt read-only"
    launch ro 60 "" -- --train.steps=4 --checkpoint.every=2 --train.eval_every=0 --checkpoint.dir="$mnt/ck" \
      --checkpoint.resume=none
    [[ $code -eq 2 ]] || { cat "$run/ro.err"; fail "read-only checkpoint.dir: exit $code, expected 2"; }
    line=$(own_lines ro)
    [[ $(wc -l <<<"$line") -eq 1 && $line == *"checkpoint.dir '$mnt/ck' is not writable: Read-only file system"* ]] ||
      { cat "$run/ro.err"; fail "read-only checkpoint.dir: expected one line naming it"; }
    grep -q "tokens per step" "$run/ro.out" && fail "read-only checkpoint.dir: training started"
    echo "read-only checkpoint.dir: exit 2: $line"
    ;;
  bad_input)
    # Errors every rank sees: said once, by rank 0, before any step.
    touch "$run/a_file"
    cases=("checkpoint.dir '$run/a_file' cannot be a checkpoint directory" --checkpoint.dir="$run/a_file"
           "checkpoint.dir '/dev/null' cannot be a checkpoint directory" --checkpoint.dir=/dev/null
           "the required argument for option '--config' is missing" --config
           "'-train.steps=3': deck keys take two dashes" -train.steps=3
           "device.threads (4096) exceeds the" --device.threads=4096)
    for ((i = 0; i < ${#cases[@]}; i += 2)); do
      text=${cases[i]} arg=${cases[i + 1]}
      launch "bad$i" 60 "" -- --train.steps=2 --train.eval_every=0 "$arg"
      [[ $code -eq 2 ]] || { cat "$run/bad$i.err"; fail "$arg: exit $code, expected 2"; }
      line=$(own_lines "bad$i")
      [[ $(wc -l <<<"$line") -eq 1 && $line == "hsdp-train: "*"$text"* ]] ||
        { cat "$run/bad$i.err"; fail "$arg: expected one line from rank 0 saying \"$text\""; }
      grep -q "tokens per step" "$run/bad$i.out" && fail "$arg: training started"
      echo "$arg: exit 2: $line"
    done
    unchanged bad_input
    ;;
  *) echo "unknown check $check"; exit 2 ;;
esac
