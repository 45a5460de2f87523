#!/usr/bin/env bash
# Figures keep their meaning across world sizes and workflows (label e2e), on the quickstart deck:
#   eval    the val loss of one checkpoint is the same on 4 ranks (2x2, full_shard) and on 1 rank: train.eval_tokens
#           picks the same windows whatever the world size (micro_batch 2 on both, so even the batches are the
#           same pairs of windows: per-position losses are bit-identical and only the order of the double sum
#           differs, ~1e-15 relative; tolerance 1e-9). eval_only writes eval_step_<N>.json and leaves the run's
#           summary.json and metrics.jsonl byte-identical.
#   resume  a run of 4 ranks (4 x micro_batch 2 x 64 tokens = 512 per step) resumed on 2 ranks runs grad_accum 2,
#           says so in one line and keeps 512 tokens per step; on 3 ranks (3 x 2 x 64 = 384 does not divide 512)
#           it exits 2 naming the numbers of ranks that would; summary.json totals both segments.
#   metrics comm_ms <= step_ms and exposed_comm_ms <= comm_ms on every step; a UTC time stamp on every line.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
shift 4
mpiexec=$1  # the mpirun binary; the world size varies here
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
launch() { local np=$1; shift; "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$train" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.steps=6 --train.eval_every=0 --log.every=100 --train.eval_tokens=4096 --train.micro_batch=2)
rm -rf "$run"
mkdir -p "$run"

launch 4 "${common[@]}" --topology.ranks_per_node=2 --parallel.sharding=full_shard --checkpoint.dir="$run/ck" \
  --log.dir="$run/log4" --train.stop_at_step=3 >"$run/first.log"
cp "$run/log4/summary.json" "$run/summary_before.json"
cp "$run/log4/metrics.jsonl" "$run/metrics_before.jsonl"

# eval: 4 ranks into the run's own log dir, then 1 rank elsewhere
launch 4 "${common[@]}" --topology.ranks_per_node=2 --parallel.sharding=full_shard --train.eval_only=true \
  --checkpoint.resume="$run/ck/step_3.h5" --log.dir="$run/log4" >"$run/eval4.log"
cmp "$run/summary_before.json" "$run/log4/summary.json" || fail "eval_only overwrote the run's summary.json"
cmp "$run/metrics_before.jsonl" "$run/log4/metrics.jsonl" || fail "eval_only rewrote the run's metrics.jsonl"
[[ -f $run/log4/eval_step_3.json ]] || fail "eval_only wrote no eval_step_3.json"
launch 1 "${common[@]}" --train.eval_only=true --checkpoint.resume="$run/ck/step_3.h5" --log.dir="$run/eval1" \
  >"$run/eval1.log"
python3 - "$run/log4/eval_step_3.json" "$run/eval1/eval_step_3.json" <<'PY'
import json, sys
a, b = (json.load(open(p))["final_val_loss"] for p in sys.argv[1:3])
rel = abs(a - b) / a
print(f"val loss of step 3 on 4 ranks {a!r}, on 1 rank {b!r}: relative difference {rel:.1e} (<= 1e-9)")
sys.exit(0 if rel <= 1e-9 else 1)
PY

# resume on 2 ranks: grad_accum 2 keeps 512 tokens per step
launch 2 "${common[@]}" --topology.ranks_per_node=1 --parallel.sharding=hybrid_shard --checkpoint.dir="$run/ck2" \
  --checkpoint.resume="$run/ck/step_3.h5" --log.dir="$run/log2" >"$run/resume2.log"
grep -q "resume: 4 -> 2 ranks: train.grad_accum 1 -> 2 keeps the run's global batch of 512 tokens per step" \
  "$run/resume2.log" || fail "no line saying grad_accum follows: $(cat "$run/resume2.log")"
python3 - "$run/log2/metrics.jsonl" "$run/log2/summary.json" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
summary = json.load(open(sys.argv[2]))
assert [s["step"] for s in steps] == [4, 5, 6], [s["step"] for s in steps]
assert all(s["tokens"] == 512 for s in steps), [s["tokens"] for s in steps]
# Timing words: comm is the time at least one collective was in flight (never more than the step), exposed the part
# of it compute waited for; every line has a UTC wall-clock stamp.
import datetime
for s in steps:
    assert 0 <= s["exposed_comm_ms"] <= s["comm_ms"] + 1e-6 <= s["step_ms"] + 1e-6, s
    assert s["time"].endswith("Z") and datetime.datetime.strptime(s["time"], "%Y-%m-%dT%H:%M:%S.%fZ"), s["time"]
    assert s["bytes_inter"] >= s["bytes_inter_max_rank"] > 0, s  # hybrid_shard on 2 nodes: job-wide >= busiest rank
assert summary["steps"] == 6 and summary["segments"] == 2, summary
assert summary["seconds"] > summary["segment_seconds"] > 0, summary
print(f"resumed on 2 ranks: 512 tokens per step, summary: {summary['steps']} steps in {summary['segments']} segments, "
      f"{summary['seconds']:.1f} s ({summary['segment_seconds']:.1f} s in this one)")
PY

# resume on 3 ranks: no grad_accum keeps 512 tokens per step
set +e
out=$(launch 3 "${common[@]}" --topology.ranks_per_node=3 --parallel.sharding=full_shard \
  --checkpoint.dir="$run/ck3" --checkpoint.resume="$run/ck/step_3.h5" --log.dir="$run/log3" 2>&1)
code=$?
set -e
[[ $code -eq 2 ]] || fail "resume on 3 ranks exited $code, expected 2: $out"
grep -q "no train.grad_accum keeps the global batch: run on one of 1, 2, 4 ranks, or set checkpoint.accept_changes=true to train on with another global batch, or start a new run" <<<"$out" ||
  fail "the message does not name the choices: $out"
echo "resume on 3 ranks: exit 2: $(grep -o 'resume: .*' <<<"$out" | head -1)"
# ... and with checkpoint.accept_changes=true it trains on, saying the global batch it changes to (3 x 2 x 64 = 384)
out=$(launch 3 "${common[@]}" --topology.ranks_per_node=3 --parallel.sharding=full_shard --checkpoint.accept_changes=true \
  --checkpoint.dir="$run/ck3" --checkpoint.resume="$run/ck/step_3.h5" --log.dir="$run/log3" 2>&1) ||
  fail "resume on 3 ranks with checkpoint.accept_changes=true failed: $out"
grep -q "resume: continuing with what is trained changed (checkpoint.accept_changes=true): global batch 384 tokens per step (the checkpoint's run: 512)" <<<"$out" ||
  fail "the accepted change of the global batch is not said: $out"
echo "resume on 3 ranks with checkpoint.accept_changes=true: trains on, saying the global batch 512 -> 384"

# Resumed again (a requeue): each resume starts from the deck's train.grad_accum and keeps the global batch of the
# checkpoint's last segment. On 2 ranks from the 2-rank segment: grad_accum 2 again (before, the same rank count took
# the deck's 1: 256 tokens per step, refused). From the segment of the accepted change (384 a step on 3 ranks): 384
# again on 3 ranks, and grad_accum 3 on 1 rank (before, both took the run's mean, (3 x 512 + 3 x 384) / 6 = 448, and
# refused).
launch 2 "${common[@]}" --topology.ranks_per_node=1 --parallel.sharding=hybrid_shard --checkpoint.dir="$run/ck2" \
  --train.steps=7 --log.dir="$run/log2" >"$run/resume2_again.log" 2>&1 ||
  fail "resumed again on 2 ranks: $(cat "$run/resume2_again.log")"
grep -q "resume on 2 ranks: train.grad_accum 1 -> 2 keeps the run's global batch of 512 tokens per step" \
  "$run/resume2_again.log" || fail "resumed again on 2 ranks: no line saying grad_accum 2: $(cat "$run/resume2_again.log")"
launch 3 "${common[@]}" --topology.ranks_per_node=3 --parallel.sharding=full_shard --checkpoint.dir="$run/ck3" \
  --train.steps=7 --log.dir="$run/log3" >"$run/resume3_again.log" 2>&1 ||
  fail "resumed again on 3 ranks: $(cat "$run/resume3_again.log")"
launch 1 "${common[@]}" --checkpoint.dir="$run/ck1" --checkpoint.resume="$run/ck3/step_6.h5" --train.steps=7 \
  --log.dir="$run/log1" >"$run/resume1.log" 2>&1 || fail "resumed on 1 rank: $(cat "$run/resume1.log")"
grep -q "resume: 3 -> 1 ranks: train.grad_accum 1 -> 3 keeps the run's global batch of 384 tokens per step" \
  "$run/resume1.log" || fail "resumed on 1 rank: no line saying grad_accum 3: $(cat "$run/resume1.log")"
python3 - "$run/log2/metrics.jsonl" "$run/log3/metrics.jsonl" "$run/log1/metrics.jsonl" <<'PY'
import json, sys
last = [json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:4]]
assert [(s["step"], s["tokens"]) for s in last] == [(7, 512), (7, 384), (7, 384)], last
PY
echo "resumed again: 2 ranks keep 512 tokens per step (grad_accum 2), 3 ranks keep the accepted 384, 1 rank 384 (grad_accum 3)"
