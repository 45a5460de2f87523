#!/usr/bin/env bash
# End-to-end checks of hsdp-sweep (label e2e). One check per call:
#
#   sweep_test.sh expand      HSDP_SWEEP HSDP_TRAIN WORK   decks and points.txt of a 2x2 (+ nodes) study
#   sweep_test.sh unknown_key HSDP_SWEEP HSDP_TRAIN WORK   a misspelled key exits 2 naming it
#   sweep_test.sh bad_input   HSDP_SWEEP HSDP_TRAIN WORK   a refused point, --out, --train, --clean on no study, a
#                                                          shared checkpoint.dir, run's options, collect's files: exit 2
#                                                          with one line naming it, every file left as it was
#   sweep_test.sh local_study HSDP_SWEEP HSDP_TRAIN WORK HSDP_DATA   4 points over no_shard, run --local,
#                                                          collect: CSV, Markdown table, PNGs
#   sweep_test.sh cluster_study HSDP_SWEEP HSDP_TRAIN WORK HSDP_DATA  (label cluster, root) full_shard and
#                                                          hybrid_shard at links not capped and capped at 50 Mbit/s,
#                                                          run --cluster on 2 hosts x 2 ranks: the order at 50 Mbit/s,
#                                                          the link column, link.png; run --local refuses a capped point
#
# Paths in the decks are absolute, so the checks run from any directory; WORK is emptied first.
set -euo pipefail
check=$1 sweep=$2 train=$3 work=$4
export HSDP_TRAIN=$train  # the hsdp-train under test, whichever build it is in
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }

write_spec() { # $1 = path, $2 = extra [axes] lines
  cat >"$1" <<EOF
[study]
name = test
base = $repo/input/quickstart.ini
np = 2

[fixed]
parallel.sharding = no_shard
data.train = $work/data/train.bin
data.val = $work/data/val.bin
data.entropy_json = $work/data/source.json
train.steps = 4
train.warmup_steps = 2
train.eval_every = 2
train.eval_tokens = 512
log.every = 2

[axes]
train.micro_batch = 1,2
train.lr = 1e-3,3e-3
$2
EOF
}

refused() { # $1 = what the one line on stderr says; the rest: hsdp-sweep's arguments. Exit 2 expected.
  local want=$1 status=0
  shift
  "$sweep" "$@" >"$work/out" 2>"$work/err" || status=$?
  if ! { [[ $status == 2 && $(wc -l <"$work/err") == 1 ]] && grep -qF -- "$want" "$work/err"; }; then
    fail "hsdp-sweep $*: exit $status, expected 2 and one line saying \"$want\": $(cat "$work/err")"
  fi
}

state() { # every file under the paths with its checksum, and every directory
  find "$@" -type f -exec sha256sum {} + | sort
  find "$@" | sort
}

case $check in
expand)
  write_spec "$work/spec.ini" "launch.nodes = 1,2"
  "$sweep" expand "$work/spec.ini" --out "$work/study" >"$work/expand.out"
  cat "$work/expand.out"
  points=$work/study/points.txt
  [[ $(grep -vc '^#' "$points") == 8 ]] || fail "points.txt should list 8 points"
  # The last axis varies fastest; indices from 0; deck paths absolute; values tab-separated.
  expected=$(printf '%s\n' \
    "0	$work/study/point_0/deck.ini	train.micro_batch=1 train.lr=1e-3 launch.nodes=1" \
    "5	$work/study/point_5/deck.ini	train.micro_batch=2 train.lr=1e-3 launch.nodes=2" \
    "7	$work/study/point_7/deck.ini	train.micro_batch=2 train.lr=3e-3 launch.nodes=2")
  while IFS= read -r line; do
    grep -qxF "$line" "$points" || fail "points.txt lacks the line '$line'"
  done <<<"$expected"
  deck=$work/study/point_5/deck.ini
  for kv in "micro_batch = 2" "lr = 1e-3" "steps = 4" "sharding = no_shard" "dir = $work/study/point_5" \
    "train = $work/data/train.bin" "n_layer = 4"; do
    grep -qxF "$kv" "$deck" || fail "$deck lacks '$kv'"
  done
  grep -v '^#' "$deck" | grep -q "launch" && fail "$deck must not contain the launch.nodes axis"
  # The deck is one hsdp-train accepts as it is.
  "$train" --config "$deck" --print-config >/dev/null || fail "hsdp-train rejects $deck"
  # One array per node count.
  grep -qF "sbatch --nodes=1 --array=0,2,4,6 jobscripts/study.sbatch $work/study" "$work/expand.out" ||
    fail "no sbatch line for the 1-node points"
  grep -qF "sbatch --nodes=2 --array=1,3,5,7 jobscripts/study.sbatch $work/study" "$work/expand.out" ||
    fail "no sbatch line for the 2-node points"
  cmp -s "$work/spec.ini" "$work/study/study.ini" || fail "study.ini is not a copy of the spec"
  echo "expand: 8 points, decks, points.txt and sbatch lines as expected"
  ;;

unknown_key)
  write_spec "$work/spec.ini" "train.micro_bach = 1,2"
  status=0
  "$sweep" expand "$work/spec.ini" --out "$work/study" 2>"$work/err" || status=$?
  cat "$work/err"
  [[ $status == 2 ]] || fail "exit $status, expected 2"
  grep -qF "unknown key 'train.micro_bach' in [axes]" "$work/err" || fail "the message does not name the key"
  [[ $(wc -l <"$work/err") == 1 ]] || fail "expected one line on stderr"
  write_spec "$work/spec2.ini" "" && sed -i 's/^train.steps = 4/train.stepz = 4/' "$work/spec2.ini"
  status=0
  "$sweep" expand "$work/spec2.ini" --out "$work/study2" 2>"$work/err2" || status=$?
  if ! { [[ $status == 2 ]] && grep -qF "unknown key 'train.stepz' in [fixed]" "$work/err2"; }; then
    fail "a bad [fixed] key: exit $status, $(cat "$work/err2")"
  fi
  write_spec "$work/spec3.ini" "parallel.sharding = no_shard,bogus"
  status=0
  "$sweep" expand "$work/spec3.ini" --out "$work/study3" 2>"$work/err3" || status=$?
  if ! { [[ $status == 2 ]] && grep -qF "'parallel.sharding' is both in [fixed] and in [axes]" "$work/err3"; }; then
    fail "a key in [fixed] and [axes]: exit $status, $(cat "$work/err3")"
  fi
  sed -i '/^parallel.sharding = no_shard$/d' "$work/spec3.ini"
  status=0
  "$sweep" expand "$work/spec3.ini" --out "$work/study3" 2>"$work/err3" || status=$?
  if ! { [[ $status == 2 ]] && grep -qF "parallel.sharding: unknown value 'bogus'" "$work/err3"; }; then
    fail "a bad value: exit $status, $(cat "$work/err3")"
  fi
  # A point every run would refuse (hpZ with hybrid_shard: a check across keys) is refused by expand, named.
  write_spec "$work/spec4.ini" "zeropp.hpz_partition_size = 0,2" && sed -i 's/^parallel.sharding = no_shard/parallel.sharding = hybrid_shard/' "$work/spec4.ini"
  status=0
  "$sweep" expand "$work/spec4.ini" --out "$work/study4" 2>"$work/err4" || status=$?
  if ! { [[ $status == 2 ]] && grep -qF "point 1 (train.micro_batch=1 train.lr=1e-3 zeropp.hpz_partition_size=2): hsdp-train rejects it" "$work/err4" &&
         grep -qF "zeropp.hpz_partition_size=2: hpZ keeps the backward gathers inside the node" "$work/err4"; }; then
    fail "a point every run refuses: exit $status, $(cat "$work/err4")"
  fi
  echo "unknown keys and values, and points every run would refuse: exit 2 with the key or point named"
  ;;

bad_input)
  # A study with an earlier run's record in point 0, a directory that is no study, a file; the specs (2 points each,
  # without the train.lr axis: every point is an hsdp-train call).
  write_spec "$work/spec.ini" ""
  write_spec "$work/refused.ini" "zeropp.hpz_partition_size = 0,2"
  sed -i 's/^parallel.sharding = no_shard/parallel.sharding = hybrid_shard/' "$work/refused.ini"
  write_spec "$work/ckpt.ini" "" && sed -i "s|^log.every = 2|&\ncheckpoint.dir = $work/ckpt|" "$work/ckpt.ini"
  write_spec "$work/name.ini" "" && sed -i 's|^name = test|name = a/b|' "$work/name.ini"
  write_spec "$work/rel.ini" "" && sed -i 's|^base = .*|base = base.ini|' "$work/rel.ini"
  sed -i '/^train.lr = /d' "$work"/{spec,refused,ckpt,name,rel}.ini
  study=$work/study
  "$sweep" expand "$work/spec.ini" --out "$study" >/dev/null
  echo 2 >"$study/point_0/exit_code"
  echo '{"step":1}' >"$study/point_0/metrics.jsonl"
  echo '{"np": 2, "where": "local"}' >"$study/point_0/launch.json"
  mkdir -p "$work/photos/point_photos"
  touch "$work/photos/point_photos/a.jpg" "$work/photos/points.txt" "$work/photos/results.md" "$work/file"
  before=$(state "$study" "$work/photos" "$work/file")
  # Point 1 refused by hsdp-train: nothing written, not even with --clean (point 0 passes, points 2 and 3 are new).
  refused "point 1 (train.micro_batch=1 zeropp.hpz_partition_size=2): hsdp-train rejects it" \
    expand "$work/refused.ini" --out "$study" --clean
  refused "--out '$work/file' cannot be a directory: '$work/file' exists and is not one" \
    expand "$work/spec.ini" --out "$work/file"
  refused "--out '$work/file/study' cannot be a directory: '$work/file' exists" \
    expand "$work/spec.ini" --out "$work/file/study"
  refused "--train '$work/nope' does not exist" expand "$work/spec.ini" --out "$work/new" --train "$work/nope"
  refused "--train '$work' is a directory" expand "$work/spec.ini" --out "$work/new" --train "$work"
  refused "--train '$work/spec.ini' is not executable" \
    expand "$work/spec.ini" --out "$work/new" --train "$work/spec.ini"
  # A directory that is no study is neither written into nor cleaned (point_photos/ is no point's directory).
  for clean in "" --clean; do
    refused "--out '$work/photos' holds files but no study of hsdp-sweep" \
      expand "$work/spec.ini" --out "$work/photos" $clean
  done
  refused "points 0 and 1 share checkpoint.dir '$work/ckpt'" expand "$work/ckpt.ini" --out "$work/new"
  refused "[study] name 'a/b' has a '/'" expand "$work/name.ini" --out "$work/new"
  # run's options: refused before a point's record is touched.
  refused "--np must be positive, not 0" run --local "$study" --np 0
  refused "--timeout must be a positive number of seconds, not -1" run --local "$study" --timeout -1
  refused "--timeout must be a positive number of seconds, not nan" run --local "$study" --timeout nan
  refused "--mpirun '$work/nope' does not exist" run --local "$study" --mpirun "$work/nope"
  refused "--mpirun '$work' is a directory" run --local "$study" --mpirun "$work"
  refused "--mpirun-args '\"unclosed': No closing quotation" run --local "$study" '--mpirun-args="unclosed'
  [[ $(state "$study" "$work/photos" "$work/file") == "$before" ]] || fail "a refused command changed files"
  [[ ! -e $work/new && ! -e $work/ckpt ]] || fail "a refused command made a directory"
  echo "refused expand and run: exit 2, one line naming the problem, every file as it was"
  # collect: a metrics line that is no JSON object, a summary value of the wrong kind.
  echo '[1]' >>"$study/point_0/metrics.jsonl"
  refused "$study/point_0/metrics.jsonl:2: not a JSON object" collect "$study"
  echo '{"step":1}' >"$study/point_0/metrics.jsonl"
  echo '{"final_loss": "low"}' >"$study/point_0/summary.json"
  refused "$study/point_0/summary.json: final_loss is \"low\", not a number" collect "$study"
  echo "collect: a metrics line or a summary value of the wrong kind: exit 2 naming the file"
  # A study whose spec names its base deck relative to itself, run from another directory: np from its study.ini.
  cp "$repo/input/quickstart.ini" "$work/base.ini"
  (cd "$work" && "$sweep" expand rel.ini --out rel >/dev/null)
  (cd / && "$sweep" run --local "$work/rel" --mpirun true >"$work/rel.out") ||
    fail "run from / exited $?: $(cat "$work/rel.out")"
  grep -q "^hsdp-sweep: running 2 point(s) of $work/rel with .*, 2 rank(s) each" "$work/rel.out" ||
    fail "run from /: $(cat "$work/rel.out")"
  echo "run of a study from another directory: its spec's np, its relative base deck not needed"
  ;;

cluster_study)
  data_tool=$5
  "$data_tool" synth --out-dir "$work/data" >/dev/null
  cat >"$work/spec.ini" <<EOF
[study]
name = link
base = $repo/input/quickstart.ini
np = 2
[fixed]
data.train = $work/data/train.bin
data.val = $work/data/val.bin
data.entropy_json =
train.steps = 4
train.micro_batch = 8
train.eval_every = 0
log.every = 1
checkpoint.dir =
device.threads = 1
[axes]
parallel.sharding = full_shard,hybrid_shard
launch.link_mbit = 0,50
EOF
  status=0
  "$sweep" run --local "$work/spec.ini" --out "$work/refused" --np 2 2>"$work/refused.err" || status=$?
  if [[ $status != 2 ]] || ! grep -q "run --cluster" "$work/refused.err"; then
    fail "run --local with a capped point: exit $status, $(cat "$work/refused.err")"
  fi
  status=0
  HSDP_CLUSTER=hsdpsw HSDP_CLUSTER_NET=101 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$sweep" run --cluster "$work/spec.ini" --out "$work/study" --timeout 120 --collect >"$work/run.out" 2>&1 || status=$?
  if grep -q "needs the test cluster" "$work/run.out"; then
    echo "SKIP: $(grep "needs the test cluster" "$work/run.out")"
    exit 77
  fi
  [[ $status == 0 ]] || { cat "$work/run.out"; fail "run --cluster exited $status"; }
  grep "^point" "$work/run.out"
  python3 - "$work/study" <<'PY'
import csv, os, sys
study = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(study, "results.csv"))))
assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), [(r["index"], r["status"]) for r in rows]
tps = {(r["parallel.sharding"], r["launch.link_mbit"]): float(r["tokens_per_s"]) for r in rows}
assert all(float(r["bytes_inter_per_step"]) > 0 for r in rows), "2 hosts: bytes cross the link"
assert tps[("hybrid_shard", "50")] > tps[("full_shard", "50")], tps
assert tps[("full_shard", "0")] > 2 * tps[("full_shard", "50")], f"the cap slows full_shard: {tps}"
blocks = [b for b in open(os.path.join(study, "link.dat")).read().split("\n\n\n") if b.strip()]
assert len(blocks) == 2 and all(len(b.strip().splitlines()) == 1 + 2 for b in blocks), "link.dat: 2 series x 2 rates"
if os.path.exists(os.path.join(study, "throughput.png")):  # gnuplot there
    with open(os.path.join(study, "link.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", "link.png is not a PNG"
print("cluster study: tokens/s", {f"{k[0]}@{k[1]}": round(v) for k, v in tps.items()})
PY
  # A second sweep while one holds the cluster (its lock held here): refused, the cluster's state left alone. (Point
  # 0 made unfinished, so that it has a point to run.)
  rm "$work/study/point_0/exit_code"
  mkdir -p /run/hsdp-cluster/hsdpsw
  touch /run/hsdp-cluster/hsdpsw/held
  status=0
  (
    flock -n 9 || fail "cannot take the lock"
    HSDP_CLUSTER=hsdpsw HSDP_CLUSTER_NET=101 "$sweep" run --cluster "$work/study" >"$work/second.out" 2>&1
  ) 9>/run/hsdp-cluster/hsdpsw.sweep.lock || status=$?
  held=$([[ -e /run/hsdp-cluster/hsdpsw/held ]] && echo kept || echo removed)
  rm -rf /run/hsdp-cluster/hsdpsw
  rm -f /run/hsdp-cluster/hsdpsw.sweep.lock
  [[ $status == 2 && $held == kept ]] || fail "a second sweep: exit $status, the cluster's state $held: $(cat "$work/second.out")"
  grep -q "the test cluster 'hsdpsw' is in use by another hsdp-sweep run --cluster" "$work/second.out" ||
    fail "the refusal does not say why: $(cat "$work/second.out")"
  echo "a second sweep on the same cluster: refused (exit 2), the first one's cluster left alone"
  ;;
local_study)
  data_tool=$5
  "$data_tool" synth --out-dir "$work/data" >/dev/null
  write_spec "$work/spec.ini" ""
  "$sweep" run --local "$work/spec.ini" --out "$work/study" --np 2 --timeout 60 || fail "run --local exited $?"
  "$sweep" collect "$work/study" >"$work/collect.out" || fail "collect exited $?"
  python3 - "$work/study" <<'PY'
import csv, os, sys
study = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(study, "results.csv"))))
assert len(rows) == 4, f"{len(rows)} rows in results.csv, expected 4"
for r in rows:
    assert r["status"] == "ok", f"point {r['index']}: status {r['status']}"
    assert r["strategy"] == "no_shard" and r["world_size"] == "2" and r["steps"] == "4", r
    for key in ("tokens_per_s", "step_ms", "exposed_comm_ms", "memory_peak_bytes", "bytes_intra_per_step",
                "final_loss", "final_val_loss"):
        assert r[key] != "" and float(r[key]) >= 0, f"point {r['index']}: {key} = {r[key]!r}"
    assert float(r["bytes_intra_per_step"]) > 0, "no_shard on 2 ranks sends its gradients every step"
assert [(r["train.micro_batch"], r["train.lr"]) for r in rows] == \
    [("1", "1e-3"), ("1", "3e-3"), ("2", "1e-3"), ("2", "3e-3")], "axis columns"
md = open(os.path.join(study, "results.md")).read().splitlines()
header = [l for l in md if l.startswith("| #")]
assert header and "tokens/s" in header[0] and "final val loss" in header[0] and "train.lr" in header[0], header
assert sum(1 for l in md if l.startswith("| ") and l.endswith("| ok |")) == 4, "4 ok rows in results.md"
for png in ("throughput.png", "memory.png", "bytes.png", "loss.png"):
    with open(os.path.join(study, png), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
script = open(os.path.join(study, "plots.gp")).read()
# bytes.png plots metrics.jsonl's bytes_intra/bytes_inter, which are every rank's together: its labels say so.
assert 'bytes sent per step by all ranks together' in script and '"MiB per step, all ranks"' in script, "bytes labels"
# The rotated point labels fit: the bottom margin holds half the longest label (sin 30), plus the axis.
longest = max(len(l.split("\t")[1]) for l in open(os.path.join(study, "results.dat")) if not l.startswith("#"))
bmargin = int(script.split("set bmargin ")[1].split()[0])
assert bmargin >= longest / 2 + 2, (bmargin, longest)
blocks = [b for b in open(os.path.join(study, "loss.dat")).read().split("\n\n\n") if b.strip()]
assert len(blocks) == 4 and all(len(b.strip().splitlines()) == 1 + 4 for b in blocks), "loss.dat: 4 points x 4 steps"
print("local study: 4 points ok; results.csv, results.md and 4 PNGs (loss curves too) written")
PY
  # A failing point (a missing data file: only the run finds out) does not stop the next one.
  cat >"$work/fail.ini" <<EOF
[study]
base = $work/study/point_0/deck.ini
[fixed]
train.steps = 2
[axes]
data.train = $work/nope.bin,$work/data/train.bin
EOF
  status=0
  "$sweep" run --local "$work/fail.ini" --out "$work/fail" --np 1 --collect >"$work/fail.out" || status=$?
  [[ $status == 1 ]] || fail "run with a failing point exited $status, expected 1"
  [[ $(cat "$work/fail/point_0/exit_code") == 2 && $(cat "$work/fail/point_1/exit_code") == 0 ]] ||
    fail "exit codes recorded: $(cat "$work"/fail/point_*/exit_code | tr '\n' ' ')"
  if ! { grep -q '^0,.*,failed (exit 2),2,' "$work/fail/results.csv" && grep -q '^1,.*,ok,0,' "$work/fail/results.csv"; }; then
    fail "results.csv: $(cat "$work/fail/results.csv")"
  fi
  echo "failing point: recorded (exit 2), the next point ran, run exited 1"
  # Run again: the point that finished keeps its results and is not run; the failed one runs again.
  kept=$(sha256sum "$work/fail/point_1/summary.json" "$work/fail/point_1/metrics.jsonl")
  status=0
  "$sweep" run --local "$work/fail" --np 1 >"$work/again.out" || status=$?
  [[ $status == 1 ]] || fail "run again with the failing point exited $status, expected 1"
  grep -q '^point 1: finished earlier (exit 0, summary.json): kept, not run again' "$work/again.out" ||
    fail "point 1 not kept: $(cat "$work/again.out")"
  grep -q '^point 0 (1/1) .*exit 2' "$work/again.out" || fail "point 0 not run again: $(cat "$work/again.out")"
  [[ $(sha256sum "$work/fail/point_1/summary.json" "$work/fail/point_1/metrics.jsonl") == "$kept" ]] ||
    fail "run again changed a finished point's results"
  echo "run again: the finished point kept, the failed one run again"
  # Run again with another --np: refused (exit 2, naming the kept point and how it ran), nothing run: from hsdp-sweep's
  # launch record, and from hsdp-train's world_size where there is none (a point run by study.sbatch).
  for record in launch.json world_size; do
    [[ $record == world_size ]] && mv "$work/fail/point_1/launch.json" "$work/launch.json"
    status=0
    "$sweep" run --local "$work/fail" --np 2 >"$work/np.out" 2>"$work/np.err" || status=$?
    [[ $status == 2 ]] || fail "run again with --np 2 exited $status, expected 2: $(cat "$work/np.out" "$work/np.err")"
    want="point 1 ran with --np 1 --local (this run: --np 2 --local)"
    [[ $record == world_size ]] && want="point 1 ran on 1 rank(s), where this run would use 2 (this run: --np 2 --local)"
    grep -qF "$want" "$work/np.err" || fail "the refusal ($record) does not say '$want': $(cat "$work/np.err")"
    { [[ $(cat "$work/fail/point_0/exit_code") == 2 ]] && ! grep -q "^point 0 (" "$work/np.out"; } ||
      fail "the refused run ran point 0: $(cat "$work/np.out")"
  done
  mv "$work/launch.json" "$work/fail/point_1/launch.json"
  echo "run again with another --np: refused (from the launch record, from world_size), nothing run"
  # A point interrupted after its checkpoint (no exit_code, no summary.json) resumes from it and continues its record.
  # Without --np: the one the study's points ran with (1, not the default 4).
  rm "$work/fail/point_1/exit_code" "$work/fail/point_1/summary.json"
  "$sweep" run --local "$work/fail" >"$work/resumed.out" || true
  grep -q '^hsdp-sweep: --np 1, as the study.s earlier points ran' "$work/resumed.out" ||
    fail "no --np from the earlier run: $(cat "$work/resumed.out")"
  grep -q '^point 1 (2/2) .* 1 rank(s): exit 0' "$work/resumed.out" || fail "point 1 not run again: $(cat "$work/resumed.out")"
  [[ $(wc -l <"$work/fail/point_1/metrics.jsonl") == 2 && -f $work/fail/point_1/summary.json ]] ||
    fail "the resumed point's record: $(wc -l <"$work/fail/point_1/metrics.jsonl") metrics lines"
  echo "an interrupted point with a checkpoint: resumed, its metrics kept"
  # SIGTERM to the sweep (a batch time limit, `timeout`): the point running is stopped with it, exit 143.
  cat >"$work/long.ini" <<EOF
[study]
base = $work/study/point_0/deck.ini
[fixed]
train.steps = 1000000
train.eval_every = 0
[axes]
train.lr = 1e-3
EOF
  "$sweep" run --local "$work/long.ini" --out "$work/long" --np 1 >"$work/long.out" 2>&1 &
  sweep_pid=$!
  for _ in $(seq 200); do grep -q "^step " "$work/long/point_0/train.log" 2>/dev/null && break; sleep 0.1; done
  kill -TERM "$sweep_pid"
  status=0
  wait "$sweep_pid" || status=$?
  if [[ $status != 143 ]] || ! grep -q "terminated (SIGTERM)" "$work/long.out"; then
    fail "SIGTERM: exit $status: $(cat "$work/long.out")"
  fi
  sleep 1
  ! pgrep -f "$work/long/point_0/deck.ini" >/dev/null || fail "the point's hsdp-train outlived the sweep"
  echo "SIGTERM to a sweep: exit 143, the running point stopped"
  # Studies never mix: expanding into a directory with results is refused (exit 2, results untouched), --clean
  # deletes them first; and collect piped into head ends quietly.
  status=0
  "$sweep" expand "$work/spec.ini" --out "$work/study" 2>"$work/err_mix" || status=$?
  [[ $status == 2 ]] || fail "expand into a study with results exited $status, expected 2"
  grep -qF "holds the results of an earlier study (point_0/summary.json" "$work/err_mix" ||
    fail "the refusal does not name the results: $(cat "$work/err_mix")"
  [[ -f $work/study/point_0/summary.json ]] || fail "the refused expand deleted results"
  "$sweep" expand "$work/spec.ini" --out "$work/study" --clean >/dev/null || fail "expand --clean exited $?"
  # Only the new study is left: no earlier point's record, no table, data, script or PNG of its collect.
  left=$(cd "$work/study" && echo *)
  [[ ! -e $work/study/point_0/summary.json && $left == "point_0 point_1 point_2 point_3 points.txt study.ini" ]] ||
    fail "--clean left an earlier study's files: $(cd "$work/study" && echo * point_0/*)"
  # The reader (`:`) is gone before hsdp-sweep (a Python start-up later) writes: every write meets a closed pipe.
  { "$sweep" collect "$work/fail" 2>"$work/err_pipe"; echo $? >"$work/status_pipe"; } | :
  status=$(cat "$work/status_pipe")
  [[ $status == 0 && ! -s $work/err_pipe ]] || fail "collect | head: status $status, stderr $(cat "$work/err_pipe")"
  echo "expand into a study with results: refused, then cleaned with --clean; collect | head ends quietly"
  ;;

*)
  fail "unknown check '$check'"
  ;;
esac
