#!/usr/bin/env bash
# A checkpoint stored otherwise than hsdp writes it (issue 15): the same file rewritten by h5repack with chunked,
# gzip-compressed datasets is read, never hung on. 4 ranks (2x2) resume from it, by path and through `latest`, with
# full_shard (every rank reads other pieces) and continue exactly as from the original; `hsdp-ckpt verify` passes; a
# byte flipped inside a compressed chunk ends with exit 2 and one line, within the time limit.
# Usage: repacked_checkpoint.sh TRAIN CKPT DECK DATA RUN MPIEXEC...
set -euo pipefail
train=$1 ckpt=$2 deck=$3 data=$4 run=$5
shift 5
mpiexec=("$@")
command -v h5repack >/dev/null || { echo "h5repack (hdf5-tools) is not installed"; exit 1; }
rm -rf "$run" && mkdir -p "$run"
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.eval_every=0 --log.every=100 --device.threads=1 --topology.ranks_per_node=2)
"${mpiexec[@]}" "$train" "${common[@]}" --train.steps=2 --log.dir="$run/log0" --checkpoint.dir="$run/original" >/dev/null
h5repack -f GZIP=6 "$run/original/step_2.h5" "$run/repacked.h5"
h5dump -p -H -d /model/transformer.wte.weight "$run/repacked.h5" | grep -q "COMPRESSION DEFLATE" ||
  { echo "h5repack did not compress the datasets"; exit 1; }

"$ckpt" verify "$run/repacked.h5"

# Step 3 from the original and from the repacked file: the same loss and gradient norm, bit for bit.
resume() {  # resume NAME ARGS...
  local name=$1; shift
  timeout 120 "${mpiexec[@]}" "$train" "${common[@]}" --train.steps=3 --parallel.sharding=full_shard \
    --log.dir="$run/$name" "$@" >"$run/$name.out" 2>&1 || { echo "$name: exit $?"; cat "$run/$name.out"; exit 1; }
  python3 -c 'import json,sys; m=[json.loads(l) for l in open(sys.argv[1])][-1]; print(m["step"], repr(m["loss"]), repr(m["grad_norm"]))' \
    "$run/$name/metrics.jsonl"
}
reference=$(resume from_original --checkpoint.dir= --checkpoint.resume="$run/original/step_2.h5")
by_path=$(resume from_repacked --checkpoint.dir= --checkpoint.resume="$run/repacked.h5")
mkdir -p "$run/auto" && cp "$run/repacked.h5" "$run/auto/step_2.h5" && echo step_2.h5 >"$run/auto/latest"
by_latest=$(resume from_latest --checkpoint.dir="$run/auto" --checkpoint.resume=auto)
echo "original: $reference | repacked: $by_path | repacked via latest: $by_latest"
[[ $reference == "$by_path" && $reference == "$by_latest" ]] || { echo "the repacked checkpoint resumes differently"; exit 1; }

# A damaged compressed chunk: one byte flipped in the middle of the file.
cp "$run/repacked.h5" "$run/damaged.h5"
size=$(stat -c %s "$run/damaged.h5")
offset=$((size / 2))
byte=$(od -An -tu1 -j $offset -N1 "$run/damaged.h5" | tr -d ' ')
printf "\\x$(printf %02x $((byte ^ 0xff)))" | dd of="$run/damaged.h5" bs=1 seek=$offset conv=notrunc status=none
set +e
timeout 120 "${mpiexec[@]}" "$train" "${common[@]}" --train.steps=3 --parallel.sharding=full_shard --log.dir="$run/dmg" \
  --checkpoint.dir= --checkpoint.resume="$run/damaged.h5" >"$run/damaged.out" 2>"$run/damaged.err"
code=$?
set -e
hsdp_lines=$(grep -c "^hsdp-train\|^\[rank" "$run/damaged.err" || true)
[[ $code -eq 2 ]] || { echo "damaged: exit $code, expected 2"; cat "$run/damaged.err"; exit 1; }
[[ $hsdp_lines -eq 1 ]] || { echo "damaged: expected one line from hsdp-train"; cat "$run/damaged.err"; exit 1; }
grep -q "damaged.h5" "$run/damaged.err" || { echo "damaged: the message does not name the file"; cat "$run/damaged.err"; exit 1; }
echo "damaged: $(grep "^hsdp-train" "$run/damaged.err")"
