#!/usr/bin/env bash
# The bandwidth study in small (issue 24; label cluster): tools/bench/bandwidth.sh on two hosts of 2 ranks, links
# not capped and capped at 100 Mbit/s, three strategies. At 100 Mbit/s full_shard+qwZ+hpZ+qgZ and hybrid_shard must
# be faster than full_shard (ZeRO++ and hierarchical sharding exist for slow links), and every point has a prediction.
# (100, not the study's slower rates: the calibration at 50 Mbit/s alone took 45 s of CI; at 100 the order holds
# with room: 1.4x and 5.2x full_shard's tokens/s, 2026-11-28.)
#   bandwidth_order.sh BUILD_DIR WORK
set -euo pipefail
build=$1 work=$2
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
code=0
"$root/tools/bench/bandwidth.sh" --build "$build" --work "$work/run" --rates 0,100 \
  --strategies full_shard,hybrid_shard,full_shard_zeropp --steps 4 --calibration-iters 8,2 --json "$work/points.jsonl" ||
  code=$?
((code == 77)) && exit 77
((code == 0)) || { echo "FAIL: bandwidth.sh exited $code"; exit 1; }
cat "$work/points.md"
python3 - "$work/points.jsonl" <<'PY'
import json, sys
points = [json.loads(l) for l in open(sys.argv[1])]
assert len(points) == 6, len(points)
for p in points:
    for key in ("strategy", "rate_mbit", "measured_step_ms", "predicted_step_ms", "tokens_per_s"):
        assert key in p and p[key] is not None, (key, p)
slow = {p["strategy"]: p for p in points if p["rate_mbit"] == 100}
full = slow["full_shard"]["tokens_per_s"]
for s in ("hybrid_shard", "full_shard_zeropp"):
    assert slow[s]["tokens_per_s"] > full, (s, slow[s]["tokens_per_s"], full)
    print(f"100 Mbit/s: {s} {slow[s]['tokens_per_s']:.0f} tokens/s > full_shard {full:.0f}")
PY
echo PASS
