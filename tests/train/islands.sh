#!/usr/bin/env bash
# Islands (parallel.islands, DiLoCo's outer step) through hsdp-train on 4 ranks = 2 emulated nodes x 2:
#  1. separate: with outer.inner_steps beyond the run, each island trains exactly as a job of its own on its part of
#     the data (data.part=i/2 on 2 ranks): every step's loss bit for bit, and the final parameters and AdamW moments
#     (the datasets' checksums) equal;
#  2. sync (fp32 pseudo-gradients): after an outer step every island holds the same parameters (island 0's /model equals /islands/1/model
#     dataset by dataset), between outer steps they differ;
#  3. resume: stopped mid-interval (hybrid_shard, int4 pseudo-gradients with error feedback, 2 fragments) and resumed,
#     the losses, the val losses and the final checkpoint's tensors equal the uninterrupted run's;
#  4. reshard: that checkpoint resumed by 4 islands of one rank, by one island, and by 2 islands of one rank each
#     (the last within fp32 reassociation of the uninterrupted run: 1e-5 relative), each saying what it did;
#  5. refusals, exit 2 with one line: island counts that do not divide the nodes, data.part with islands, fragments
#     that do not divide H, an overlap beyond H/F, `hsdp-ckpt consolidate` of an islands checkpoint; a damaged
#     outer-state dataset fails `hsdp-ckpt verify`;
#  6. overlap (outer.overlap=2, 2 fragments, H=4): the metrics say which fragment started and which was applied
#     at every step, the run differs from the blocking one from the first step an application moved, and stopped
#     with an exchange in flight and resumed, every loss and tensor equals the uninterrupted run's (the checkpoints
#     hold the in-flight shifts; verify reads them); resumed in flight with another outer.fragments: refused.
set -euo pipefail
bin=$1 deck=$2 data=$3 run=$4
mpiexec=$5
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
train=$bin/hsdp-train ckpt=$bin/hsdp-ckpt
launch() { local np=$1; shift; "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$train" "$@"; }
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.steps=12 --train.eval_every=0 --log.every=100 --device.threads=1)
rm -rf "$run"
mkdir -p "$run"
fail() { echo "FAIL: $*" >&2; exit 1; }
# The checksums of the datasets under a group of a checkpoint, in file order, one "name checksum" per line.
checksums() {  # file group
  "$ckpt" inspect "$1" | awk -v g="$2/" '/^\// { group = $1; next }
    group == g { for (i = 2; i < NF; i++) if ($i == "checksum") print $1, $(i + 1) }'
}

echo "== 1. each island is a job of its own while no outer step comes"
launch 4 "${common[@]}" --topology.ranks_per_node=2 --parallel.sharding=full_shard --parallel.islands=2 \
  --outer.inner_steps=1000 --log.dir="$run/islands" --checkpoint.dir="$run/islands_ckpt" >/dev/null
for i in 0 1; do
  launch 2 "${common[@]}" --topology.ranks_per_node=2 --parallel.sharding=full_shard --data.part=$i/2 \
    --log.dir="$run/alone$i" --checkpoint.dir="$run/alone${i}_ckpt" >/dev/null
done
python3 - "$run" <<'PY'
import json, sys
run = sys.argv[1]
islands = [json.loads(l) for l in open(f"{run}/islands/metrics.jsonl")]
alone = [[json.loads(l)["loss"] for l in open(f"{run}/alone{i}/metrics.jsonl")] for i in (0, 1)]
assert len(islands) == 12 and all(len(a) == 12 for a in alone)
for s, line in enumerate(islands):
    if line["island_losses"] != [alone[0][s], alone[1][s]]:
        sys.exit(f"step {s + 1}: island losses {line['island_losses']} != the jobs' {alone[0][s]}, {alone[1][s]}")
    if line["outer_fragment"] != -1 or line["outer_bytes"] != 0:
        sys.exit(f"step {s + 1}: an outer exchange with outer.inner_steps=1000")
print("islands = separate jobs, 12 steps, losses bit for bit")
PY
for i in 0 1; do
  group=$([ $i = 0 ] && echo "" || echo "/islands/1")
  for part in model optim/exp_avg optim/exp_avg_sq; do
    diff <(checksums "$run/islands_ckpt/step_12.h5" "$group/$part") <(checksums "$run/alone${i}_ckpt/step_12.h5" "/$part") \
      >/dev/null || fail "island $i's $part differs from the job of its own"
    [ -n "$(checksums "$run/islands_ckpt/step_12.h5" "$group/$part")" ] || fail "no datasets under $group/$part"
  done
done
echo "island 0 and 1: parameters, AdamW m and v equal the jobs' of their own (dataset checksums)"

echo "== 2. after an outer step the islands agree"
launch 4 "${common[@]}" --topology.ranks_per_node=2 --parallel.sharding=full_shard --parallel.islands=2 \
  --outer.inner_steps=4 --outer.bits=32 --checkpoint.every=1 --checkpoint.keep=0 --log.dir="$run/sync" \
  --checkpoint.dir="$run/sync_ckpt" >/dev/null
same() { diff <(checksums "$1" /model) <(checksums "$1" /islands/1/model) >/dev/null; }
same "$run/sync_ckpt/step_4.h5" || fail "after the outer step of step 4 the islands differ"
same "$run/sync_ckpt/step_3.h5" && fail "before the outer step the islands are equal: they did not train apart"
same "$run/sync_ckpt/step_5.h5" && fail "one step after the outer step the islands are still equal"
python3 - "$run/sync/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
frag = [l["outer_fragment"] for l in lines]
assert frag == [-1, -1, -1, 0] * 3, frag
assert lines[3]["outer_bytes"] > 0 and lines[3]["outer_exposed_ms"] >= 0, lines[3]
PY
for f in "$run"/sync_ckpt/step_*.h5; do [ "$f" = "$run/sync_ckpt/step_5.h5" ] || rm "$f"; done
echo "step 4: islands equal after the outer step (and not at steps 3 and 5); metrics say fragment 0 at step 4"

echo "== 3. resume mid-interval is bit-exact"
resume_args=(--topology.ranks_per_node=2 --parallel.sharding=hybrid_shard --parallel.islands=2 --outer.inner_steps=4
             --outer.fragments=2 --outer.bits=4 --train.eval_every=6)
launch 4 "${common[@]}" "${resume_args[@]}" --log.dir="$run/straight" --checkpoint.dir="$run/straight_ckpt" >/dev/null
launch 4 "${common[@]}" "${resume_args[@]}" --log.dir="$run/stopped" --checkpoint.dir="$run/stopped_ckpt" \
  --train.stop_at_step=7 >/dev/null
launch 4 "${common[@]}" "${resume_args[@]}" --log.dir="$run/stopped" --checkpoint.dir="$run/stopped_ckpt" >/dev/null
cmp <(grep -o '"loss":[^,]*\|"island_losses":[^]]*\|"val_loss":[^,]*\|"outer_fragment":[^,]*' "$run/straight/metrics.jsonl") \
    <(grep -o '"loss":[^,]*\|"island_losses":[^]]*\|"val_loss":[^,]*\|"outer_fragment":[^,]*' "$run/stopped/metrics.jsonl") \
  || fail "the resumed run's losses differ from the uninterrupted run's"
diff <("$ckpt" inspect "$run/straight_ckpt/step_12.h5" | grep checksum) \
     <("$ckpt" inspect "$run/stopped_ckpt/step_12.h5" | grep checksum) >/dev/null \
  || fail "the resumed run's final checkpoint differs from the uninterrupted run's"
"$ckpt" verify "$run/stopped_ckpt/step_12.h5"
echo "stopped at step 7 (3 steps after fragment 0's exchange), resumed: every loss and tensor bit for bit"

echo "== 4. another number of islands or of ranks per island"
out=$(launch 4 "${common[@]}" --topology.ranks_per_node=1 --parallel.sharding=full_shard --parallel.islands=4 \
  --outer.inner_steps=4 --checkpoint.resume="$run/stopped_ckpt/step_7.h5" --log.dir="$run/four" \
  --checkpoint.dir="$run/four_ckpt" 2>&1)
grep -q "island j continues island j mod 2's model, AdamW state and outer state" <<<"$out" \
  || fail "4 islands from 2 did not say what they did: $out"
out=$(launch 4 "${common[@]}" --topology.ranks_per_node=2 --parallel.sharding=hybrid_shard \
  --checkpoint.resume="$run/stopped_ckpt/step_7.h5" --log.dir="$run/one" --checkpoint.dir="$run/one_ckpt" 2>&1)
grep -q "it continues island 0's model and AdamW state; the outer parameters and momentum are dropped" <<<"$out" \
  || fail "1 island from 2 did not say what it did: $out"
# fp32 pseudo-gradients (section 2's run): 2 islands of 1 rank continue 2 islands of 2 within the reassociation of
# fp32 sums (each island's mean gradient over 4 rows on one rank instead of two ranks' means over 2), 1e-5 as in
# train_reshard_4_to_2_1_3_ranks; the outer steps of steps 8 and 12 included.
launch 2 "${common[@]}" --topology.ranks_per_node=1 --parallel.sharding=full_shard --parallel.islands=2 \
  --outer.inner_steps=4 --outer.bits=32 --train.micro_batch=4 --checkpoint.resume="$run/sync_ckpt/step_5.h5" --log.dir="$run/small" \
  --checkpoint.dir="$run/small_ckpt" >/dev/null
python3 - "$run/sync/metrics.jsonl" "$run/small/metrics.jsonl" <<'PY'
import json, sys
straight = {json.loads(l)["step"]: json.loads(l) for l in open(sys.argv[1])}
small = [json.loads(l) for l in open(sys.argv[2]) if json.loads(l)["step"] > 5]
assert len(small) == 7
worst = max(abs(a - b) / a for l in small for a, b in zip(straight[l["step"]]["island_losses"], l["island_losses"]))
print(f"2 islands of 1 rank from 2 of 2: steps 6-12 island losses within {worst:.1e} relative of the uninterrupted run")
sys.exit(0 if worst < 1e-5 else 1)
PY
for d in four_ckpt one_ckpt small_ckpt; do "$ckpt" verify "$run/$d/step_12.h5" >/dev/null; done

echo "== 5. refusals"
refuse() {  # expected-text args...
  local expect=$1; shift
  set +e
  out=$(launch 4 "${common[@]}" --checkpoint.dir= --log.dir="$run/refused" "$@" 2>&1)
  local rc=$?
  set -e
  [ $rc = 2 ] || fail "exit $rc (not 2) for $*: $out"
  [ "$(grep -c "hsdp-train: config error" <<<"$out")" = 1 ] || fail "not one error line for $*: $out"
  grep -q "$expect" <<<"$out" || fail "for $*: no '$expect' in: $out"
}
refuse "parallel.islands=3 must divide the job's 2 node(s)" --topology.ranks_per_node=2 --parallel.islands=3
refuse "parallel.islands=2 must divide the job's 1 node(s)" --topology.ranks_per_node=4 --parallel.islands=2
refuse "data.part reproduces one island" --topology.ranks_per_node=2 --parallel.islands=2 --data.part=1/2
refuse "outer.fragments=3 must divide outer.inner_steps=4" --topology.ranks_per_node=2 --parallel.islands=2 \
  --outer.inner_steps=4 --outer.fragments=3
refuse "data.part='2/2'" --data.part=2/2
# consolidate rewrites one model's state: a checkpoint of two islands is refused, and nothing is written.
set +e
out=$("$ckpt" consolidate "$run/stopped_ckpt/step_12.h5" --output "$run/one.h5" 2>&1)
rc=$?
set -e
[[ $rc == 2 && $out == *"holds the state of 2 islands"* && ! -e $run/one.h5 ]] ||
  fail "consolidate of an islands checkpoint: exit $rc, $out"
cp "$run/stopped_ckpt/step_12.h5" "$run/damaged.h5"
at=$("$ckpt" inspect "$run/damaged.h5" | awk '/^\/islands\/1\/outer\/momentum\//{g=1; next} g && /at byte/ && !done {print $NF; done = 1}')
python3 - "$run/damaged.h5" "$at" <<'PY'
import sys
path, at = sys.argv[1], int(sys.argv[2])
with open(path, "r+b") as f:
    f.seek(at + 5)
    b = f.read(1)
    f.seek(at + 5)
    f.write(bytes([b[0] ^ 0x10]))
PY
set +e
out=$("$ckpt" verify "$run/damaged.h5" 2>&1)
rc=$?
set -e
if [ $rc != 2 ] || ! grep -q "/islands/1/outer/momentum/" <<<"$out"; then
  fail "a flipped outer momentum byte passed verify ($rc): $out"
fi
refuse "outer.overlap=3 must be between 0 and outer.inner_steps / outer.fragments = 2" \
  --topology.ranks_per_node=2 --parallel.islands=2 --outer.inner_steps=4 --outer.fragments=2 --outer.overlap=3
echo "refusals: exit 2, one line each; a flipped byte of island 1's outer momentum fails verify"

echo "== 6. overlap: applied two steps after it started, resumed in flight bit for bit"
overlap_args=("${resume_args[@]}" --outer.overlap=2)
launch 4 "${common[@]}" "${overlap_args[@]}" --log.dir="$run/o_straight" --checkpoint.dir="$run/o_straight_ckpt" >/dev/null
launch 4 "${common[@]}" "${overlap_args[@]}" --log.dir="$run/o_stopped" --checkpoint.dir="$run/o_stopped_ckpt" \
  --train.stop_at_step=7 >/dev/null
listing=$("$ckpt" inspect "$run/o_stopped_ckpt/step_7.h5")
grep -q "^/islands/1/outer/in_flight_shift/" <<<"$listing" \
  || fail "the checkpoint of step 7 (fragment 1 in flight) holds no in-flight shift"
out=$("$ckpt" verify "$run/o_stopped_ckpt/step_7.h5")
grep -q "with the exchange in flight" <<<"$out" || fail "verify did not read the shifts: $out"
# Another outer.fragments would apply the saved shift to other units: refused, the checkpoint untouched.
before=$(cd "$run/o_stopped_ckpt" && sha256sum step_7.h5 latest)
set +e
out=$(launch 4 "${common[@]}" "${overlap_args[@]}" --outer.fragments=1 --log.dir="$run/o_refused" \
  --checkpoint.dir="$run/o_stopped_ckpt" 2>&1)
rc=$?
set -e
[ $rc = 2 ] && [ "$(grep -c "hsdp-train: config error" <<<"$out")" = 1 ] \
  && grep -q "outer.fragments = 1 (the checkpoint's run: 2), but the checkpoint was saved with the outer exchange of fragment 1 in flight (applied at step 8)" <<<"$out" \
  || fail "a resume in flight with another outer.fragments: exit $rc: $out"
[ "$(cd "$run/o_stopped_ckpt" && sha256sum step_7.h5 latest)" = "$before" ] || fail "the refused resume changed the checkpoint"
launch 4 "${common[@]}" "${overlap_args[@]}" --log.dir="$run/o_stopped" --checkpoint.dir="$run/o_stopped_ckpt" >/dev/null
python3 - "$run/straight/metrics.jsonl" "$run/o_straight/metrics.jsonl" "$run/o_stopped/metrics.jsonl" <<'PY'
import json, sys
blocking, straight, resumed = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
# Fragment 1 starts at steps 2, 6, 10 and fragment 0 at 4, 8, 12, each applied two steps later.
assert [l["outer_fragment"] for l in straight] == [-1, 1, -1, 0] * 3, [l["outer_fragment"] for l in straight]
assert [l["outer_applied"] for l in straight] == [-1, -1, -1, 1, -1, 0, -1, 1, -1, 0, -1, 1], \
    [l["outer_applied"] for l in straight]
assert [l["outer_applied"] for l in blocking] == [l["outer_fragment"] for l in blocking]
# Up to step 2 the blocking run is the same run; from step 3 on it applied fragment 1 two steps earlier.
key = lambda l: (l["loss"], l["island_losses"])
assert [key(l) for l in straight[:2]] == [key(l) for l in blocking[:2]], "overlap changed steps 1-2"
assert key(straight[2]) != key(blocking[2]), "step 3 equals the blocking run's: the overlap did nothing"
fields = ("loss", "island_losses", "val_loss", "outer_fragment", "outer_applied")
for a, b in zip(straight, resumed):
    if [a.get(f) for f in fields] != [b.get(f) for f in fields]:
        sys.exit(f"step {a['step']}: resumed {[b.get(f) for f in fields]} != {[a.get(f) for f in fields]}")
assert len(straight) == len(resumed) == 12
print("overlap: fragments started at 2,4,6,.. applied 2 steps later; steps 1-2 = blocking, 3 differs; resume exact")
PY
diff <("$ckpt" inspect "$run/o_straight_ckpt/step_12.h5" | grep checksum) \
     <("$ckpt" inspect "$run/o_stopped_ckpt/step_12.h5" | grep checksum) >/dev/null \
  || fail "the resumed overlapped run's final checkpoint differs from the uninterrupted run's"
"$ckpt" verify "$run/o_stopped_ckpt/step_12.h5" >/dev/null
echo "stopped at step 7 with fragment 1 in flight, resumed: every loss and tensor (in-flight shifts too) bit for bit"
echo "PASS"
