#!/usr/bin/env bash
# Runs never mix (label e2e), one rank on the quickstart deck:
#   a fresh run (checkpoint.resume=none) into a checkpoint.dir holding another run's checkpoints exits 2 naming them
#   and whose they are (the newest's step, time, ranks, strategy, the deck keys that differ) and leaves every file
#   byte-identical; checkpoint.overwrite=true deletes them, saying so, and trains;
#   checkpoint.resume=auto with a damaged latest (its file truncated) falls back to the newest checkpoint that loads,
#   saying which it skipped and why; checkpoint.fallback=false makes that exit 2 instead.
#   a fresh run into a log.dir holding another run's record (metrics.jsonl, summary.json, its log.trace timeline)
#   exits 2 naming it and leaves them byte-identical; log.overwrite=true replaces them; a run that resumes continues
#   its own record, and a resume of another run's checkpoint into it (its checkpoint's deck names another log.dir) is
#   refused the same way.
# Also: the size hsdp-train logs for a checkpoint is the size `hsdp-ckpt inspect` prints for it.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4 ckpt=$5
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.eval_every=0 --log.every=100 --train.micro_batch=8 --checkpoint.every=2 --checkpoint.dir="$run/ck"
        --checkpoint.overwrite=false)
rm -rf "$run"
mkdir -p "$run"
# expect CODE PATTERN ARGS...: hsdp-train's exit code and a line of its output
expect() {
  local code=$1 pattern=$2
  shift 2
  local out rc
  set +e
  out=$("$train" "${common[@]}" "$@" 2>&1)
  rc=$?
  set -e
  [[ $rc -eq $code ]] || fail "exit $rc, expected $code: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "output lacks /$pattern/: $out"
  printf '%s\n' "$out" >"$run/last.log"
}

expect 0 "done: 4 steps" --train.steps=4 --checkpoint.resume=none --log.dir="$run/a"
snapshot() { (cd "$run/ck" && sha256sum -- * | sort); }
before=$(snapshot)
expect 2 "checkpoint.dir '.*' holds 2 checkpoint\(s\) \(step_2.h5, step_4.h5; the newest, step 4, written .* UTC, by 1 rank\(s\) with hybrid_shard, from another deck \(log.dir differ\)\) and this run does not resume from them.*checkpoint.overwrite=true" \
  --train.steps=4 --checkpoint.resume=none --log.dir="$run/b"
[[ $(snapshot) == "$before" ]] || fail "the refused run changed the checkpoint directory"
[[ $(wc -l <"$run/last.log") -eq 1 ]] || fail "the error is not one line: $(cat "$run/last.log")"
expect 0 "checkpoint.overwrite=true and checkpoint.resume=none: deleted the 2 checkpoint\(s\) in .* \(step_2.h5, step_4.h5; the newest, step 4" --train.steps=2 --checkpoint.resume=none \
  --checkpoint.overwrite=true --log.dir="$run/c"
[[ ! -e $run/ck/step_4.h5 && -e $run/ck/step_2.h5 ]] || fail "overwrite left: $(ls "$run/ck")"
echo "another run's checkpoints: refused (exit 2, directory unchanged), then replaced with checkpoint.overwrite=true"

# damaged latest: step_4.h5 truncated
expect 0 "done: 2 steps in this run \(2 -> 4 of 4\)" --train.steps=4 --checkpoint.resume=auto --log.dir="$run/c"
[[ $(cat "$run/ck/latest") == step_4.h5 ]] || fail "latest is $(cat "$run/ck/latest")"
logged=$(grep -o 'step_4.h5: [0-9.]* MiB' "$run/last.log" | grep -o '[0-9.]* MiB')
inspection=$("$ckpt" inspect "$run/ck/step_4.h5")
inspected=$(head -n 1 <<<"$inspection" | grep -o '([0-9.]* MiB' | tr -d '(')
[[ -n $logged && $logged == "$inspected" ]] || fail "hsdp-train logged '$logged' for step_4.h5, inspect says '$inspected'"
truncate -s 4096 "$run/ck/step_4.h5"
expect 2 "step_4.h5" --train.steps=6 --checkpoint.resume=auto --checkpoint.fallback=false --log.dir="$run/d"
expect 0 "resume: skipped .*step_4.h5: .*; resumed from .*step_2.h5 instead" --train.steps=6 --checkpoint.resume=auto \
  --log.dir="$run/d"
grep -q "resumed from .*step_2.h5 (step 2" "$run/last.log" || fail "did not resume from step 2: $(cat "$run/last.log")"
grep -q "done: 4 steps in this run (2 -> 6 of 6)" "$run/last.log" || fail "did not finish: $(cat "$run/last.log")"
echo "damaged latest: $(grep -o 'resume: skipped.*' "$run/last.log" | cut -c1-160)..."

# log.dir: another run's record is never replaced silently
expect 0 "done: 3 steps" --train.steps=3 --checkpoint.dir= --log.dir="$run/log" --log.trace=true
record() { (cd "$run/log" && sha256sum metrics.jsonl summary.json trace_rank0.json); }
before=$(record)
expect 2 "log.dir '.*/log' holds another run's record \(metrics.jsonl with 3 step\(s\) and summary.json\) and this run does not continue it.*log.overwrite=true" \
  --train.steps=2 --checkpoint.dir= --log.dir="$run/log" --log.trace=true
[[ $(record) == "$before" ]] || fail "the refused run changed the record in log.dir"
[[ $(wc -l <"$run/last.log") -eq 1 ]] || fail "the error is not one line: $(cat "$run/last.log")"
trace_before=$(sha256sum <"$run/log/trace_rank0.json")
expect 0 "done: 2 steps" --train.steps=2 --checkpoint.dir= --log.dir="$run/log" --log.overwrite=true --log.trace=true
[[ $(wc -l <"$run/log/metrics.jsonl") -eq 2 ]] || fail "log.overwrite=true did not replace the record"
trace_after=$(sha256sum <"$run/log/trace_rank0.json")
[[ $trace_after != "$trace_before" && $(grep -c '"begin_step' "$run/log/trace_rank0.json") == 2 ]] ||
  fail "log.overwrite=true did not replace the trace with this run's 2 steps"
echo "another run's log.dir: refused (exit 2, record unchanged), then replaced with log.overwrite=true"
# A resume continues only the record of the run it resumes: run y's checkpoint resumed into run x's log.dir is
# refused, x's record unchanged; x resumed from its own, its log.dir written otherwise, continues it.
expect 0 "done: 4 steps" --train.steps=4 --checkpoint.dir="$run/ckx" --log.dir="$run/x"
expect 0 "done: 2 steps" --train.steps=2 --checkpoint.dir="$run/cky" --log.dir="$run/y"
record_x() { (cd "$run/x" && sha256sum metrics.jsonl summary.json); }
before=$(record_x)
expect 2 "log.dir '.*/x' holds another run's record \(metrics.jsonl with 4 step\(s\) and summary.json\) and this run does not continue it \(it resumed from a checkpoint of the run whose log.dir was '.*/y'\)" \
  --train.steps=4 --checkpoint.dir="$run/cky" --log.dir="$run/x"
[[ $(record_x) == "$before" ]] || fail "a resume of another run changed the record in log.dir"
expect 0 "done: 2 steps in this run \(4 -> 6 of 6\)" --train.steps=6 --checkpoint.dir="$run/ckx" --log.dir="$run/x/"
[[ $(wc -l <"$run/x/metrics.jsonl") -eq 6 ]] || fail "x's resume did not continue its record"
echo "a resume into another run's log.dir: refused (exit 2, record unchanged); into its own: continued"
# The last line says what was done: one step (no tokens/s: they are measured from the second step on), an evaluation
# (nothing trained; its own result file).
expect 0 "^done: 1 step in .*, no tokens/s \(measured from the second step of a segment on\)" --train.steps=1 \
  --checkpoint.dir= --log.dir="$run/one"
expect 0 "^done: evaluated the model of step 6 in .* \(train.eval_only: nothing trained\); .*eval_step_6.json" \
  --train.steps=6 --train.eval_only=true --log.dir="$run/d"
echo "the last line: one step says it has no tokens/s; an evaluation says it trained nothing"
