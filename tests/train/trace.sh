#!/usr/bin/env bash
# log.trace: 4 ranks (2 emulated nodes of 2) of hybrid_shard with qgZ write one timeline each, and the timeline
# says what the metrics say. Each file is a JSON array of Chrome trace events; per step (between begin_step
# instants) the compute track holds every unit's forward and backward once, the reduce track the qgZ all-to-all and
# the cross track the all-reduce of every unit, and the host's waits in the step add up to at least the step's
# exposed_comm_ms (the same waits, measured by the engine from begin_step to the norm).
#   trace.sh MPIEXEC... -- HSDP_TRAIN DECK DATA_DIR RUN_DIR [KEYS...]   (KEYS: more deck keys, e.g. a GPU's
#   --device.type=cuda --comm.intra=mpi: its spans are the kernels' times on the GPU)
set -euo pipefail
mpiexec=()
while [[ $1 != -- ]]; do mpiexec+=("$1"); shift; done
shift
train=$1 deck=$2 data=$3 run=$4
shift 4
rm -rf "$run"
"${mpiexec[@]}" "$train" --config "$deck" --checkpoint.dir= --data.train="$data/train.bin" --data.val="$data/val.bin" \
  --data.entropy_json= --train.steps=3 --train.eval_every=0 --log.every=100 --log.dir="$run" --log.trace=true \
  --topology.ranks_per_node=2 --parallel.sharding=hybrid_shard --precision.param=bf16 --precision.reduce=bf16 \
  --zeropp.quantized_gradients=true --device.threads=1 "$@" >"$run.out" 2>&1 || { cat "$run.out"; exit 1; }
python3 - "$run" "$(awk '$1 == "n_layer" { print $3 }' "$deck")" <<'PY'
import json, sys
run, n_layer = sys.argv[1], int(sys.argv[2])
metrics = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert len(metrics) == 3, len(metrics)
units = n_layer + 2
for rank in range(4):
    events = json.load(open(f"{run}/trace_rank{rank}.json"))
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    steps = sorted(e["ts"] for e in events if e["ph"] == "i" and e["name"].startswith("begin_step"))
    assert len(steps) == 3, f"rank {rank}: {len(steps)} begin_step instants, want 3"
    spans = [e for e in events if e["ph"] == "X"]
    assert all(e["pid"] == rank and e["dur"] >= 0 for e in spans), f"rank {rank}: a span of another pid or negative"
    for k, begin in enumerate(steps):
        end = steps[k + 1] if k + 1 < len(steps) else float("inf")
        inside = [e for e in spans if begin <= e["ts"] < end]
        names = lambda track: [e["name"] for e in inside if tracks[e["tid"]] == track]
        compute = names("compute")
        for b in range(1, n_layer + 1):
            for phase in ("forward", "backward"):
                want = f"{phase} block unit {b}"
                assert compute.count(want) == 1, f"rank {rank} step {k + 1}: '{want}' {compute.count(want)} times"
        reduce, cross = names("reduce"), names("cross")
        for u in range(units):
            assert f"qgZ all_to_all unit {u}" in reduce, f"rank {rank} step {k + 1}: no qgZ all-to-all of unit {u}"
            assert f"all_reduce gradient shard unit {u}" in cross, f"rank {rank} step {k + 1}: no all-reduce of unit {u}"
        if rank == 0:
            waited = sum(e["dur"] for e in inside if tracks[e["tid"]] == "host") / 1e3
            exposed = metrics[k]["exposed_comm_ms"]
            assert waited + 0.01 >= exposed, f"step {k + 1}: host waits {waited:.3f} ms < exposed_comm_ms {exposed:.3f}"
print(f"4 ranks x 3 steps: every unit's forward, backward, qgZ all-to-all and all-reduce in its step's timeline; "
      f"rank 0's waits cover exposed_comm_ms")
PY
# tools/bench/trace_gaps.py reads the real timeline too: its steps add up, the compute track's idle share in [0, 1],
# the idle time split by the host's part in it (waiting, after a wait, busy) adds up to it.
gaps_tool=$(dirname "${BASH_SOURCE[0]}")/../../tools/bench/trace_gaps.py
python3 "$gaps_tool" "$run/trace_rank0.json" --top 3 >"$run/gaps.jsonl"
python3 - "$run/gaps.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps, total = rows[:-1], rows[-1]
assert len(steps) == 3 and total["steps"] == 3, rows
for r in steps:
    assert abs(r["busy_ms"] + r["idle_ms"] - r["step_ms"]) < 1e-6 and r["busy_ms"] > 0, r
    assert abs(r["waiting_ms"] + r["after_wait_ms"] + r["host_busy_ms"] - r["idle_ms"]) < 1e-6, r
assert 0 <= total["idle_share"] <= 1, total
longest = total["gaps"][0]
print(f"trace_gaps.py: compute idle {100 * total['idle_share']:.1f}% of the steps (host waiting "
      f"{total['waiting_ms']:.3f} ms, after a host wait {total['after_wait_ms']:.3f}, host busy "
      f"{total['host_busy_ms']:.3f} a step); longest gap {longest['ms']:.3f} ms, after '{longest['after']}', before "
      f"'{longest['before']}': {longest['cause']}")
PY
