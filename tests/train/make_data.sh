#!/usr/bin/env bash
# Writes the quickstart source into $2, plus a truncated and a wrong-magic copy of train.bin and three damaged
# entropy files.
set -euo pipefail
hsdp_data=$1
out=$2
"$hsdp_data" synth --out-dir "$out" >/dev/null
head -c 100000 "$out/train.bin" >"$out/truncated.bin"
cp "$out/train.bin" "$out/badmagic.bin"
printf '\x01\x02\x03\x04' | dd of="$out/badmagic.bin" bs=1 seek=0 conv=notrunc status=none
# Entropy files hsdp-train must refuse like a missing key: a value that is not a finite number >= 0.
printf '{"entropy_nats_per_token": nan}\n' >"$out/entropy_nan.json"
printf '{"entropy_nats_per_token":-1.5,"vocab":64}\n' >"$out/entropy_negative.json"
printf '{"entropy_nats_per_token":"one"}\n' >"$out/entropy_garbage.json"
