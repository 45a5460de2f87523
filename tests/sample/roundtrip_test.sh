#!/usr/bin/env bash
# hsdp-ckpt export --format hf, import --format hf, export again: the same bytes; the imported checkpoint holds the
# original's weights bit for bit (compared through their llm.c exports, which include the zero-padded vocabulary
# rows); a file laid out as transformers' own (no "transformer." prefix, attn.bias mask buffers, no hsdp metadata)
# imports to the same weights, re-padded by hsdp-train's rule; directories hsdp cannot run are refused with exit 2
# and one line.
#   roundtrip_test.sh HSDP_CKPT MODEL_DIR WORK
set -euo pipefail
ckpt=$1 model=$2 work=$3
source "$(dirname "$0")/expect.sh"
rm -rf "$work" && mkdir -p "$work"
checkpoint=$model/one_rank/step_40.h5
"$ckpt" export "$checkpoint" --format hf --output "$work/hf"
grep -q '"n_positions": 64' "$work/hf/config.json"
grep -q '"vocab_size": 64' "$work/hf/config.json"
"$ckpt" import --format hf "$work/hf" --output "$work/imported.h5"
"$ckpt" export "$work/imported.h5" --format hf --output "$work/hf_again" >/dev/null
cmp "$work/hf/model.safetensors" "$work/hf_again/model.safetensors"
cmp "$work/hf/config.json" "$work/hf_again/config.json"
echo "hf export -> import -> export: the same $(stat -c %s "$work/hf/model.safetensors") + $(stat -c %s "$work/hf/config.json") bytes"
"$ckpt" export "$checkpoint" --format llmc --output "$work/original.bin" >/dev/null
"$ckpt" export "$work/imported.h5" --format llmc --output "$work/imported.bin" >/dev/null
cmp "$work/original.bin" "$work/imported.bin"
"$ckpt" inspect "$work/imported.h5" --summary | grep -q "vocab_size 64 (padded 128)"
echo "imported checkpoint: weights bit-identical to the original, vocabulary padded to 128 again"

# The layout of transformers' own files (the hub's gpt2): names without "transformer.", the attn.bias mask buffers
# of older versions, metadata {"format": "pt"} only (so the padding comes from hsdp-train's rule: 64 -> 128).
mkdir -p "$work/hub" && cp "$work/hf/config.json" "$work/hub/"
python3 - "$work/hf/model.safetensors" "$work/hub/model.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack_from("<Q", raw, 0)
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
header.pop("__metadata__")
out, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
for name, info in header.items():
    begin, end = info["data_offsets"]
    blobs.append(data[begin:end])
    out[name[len("transformer."):]] = dict(info, data_offsets=[at, at + end - begin])
    at += end - begin
    if name.endswith("ln_1.weight"):  # a [1, 1, 64, 64] causal mask per block
        mask = b"".join(struct.pack("<f", 1.0 if j <= i else 0.0) for i in range(64) for j in range(64))
        blobs.append(mask)
        out[name[len("transformer."):-len("ln_1.weight")] + "attn.bias"] = {
            "dtype": "F32", "shape": [1, 1, 64, 64], "data_offsets": [at, at + len(mask)]}
        at += len(mask)
text = json.dumps(out).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
PY
"$ckpt" import --format hf "$work/hub" --output "$work/hub.h5" >/dev/null
"$ckpt" export "$work/hub.h5" --format llmc --output "$work/hub.bin" >/dev/null
cmp "$work/original.bin" "$work/hub.bin"
echo "transformers-style names and mask buffers: the same weights, vocabulary padded to 128 by hsdp-train's rule"

# Bad directories: one line, exit 2.
expect_bad_input "not a directory" "$ckpt" import --format hf "$work/nowhere" --output "$work/x.h5"
mkdir -p "$work/relu" && cp "$work/hf/model.safetensors" "$work/relu/"
sed 's/"gelu_new"/"relu"/' "$work/hf/config.json" >"$work/relu/config.json"
expect_bad_input "'activation_function' is relu" "$ckpt" import --format hf "$work/relu" --output "$work/x.h5"
mkdir -p "$work/wide" && cp "$work/hf/model.safetensors" "$work/wide/"
sed 's/"n_embd": 128/"n_embd": 256/' "$work/hf/config.json" >"$work/wide/config.json"
expect_bad_input "config.json's model needs" "$ckpt" import --format hf "$work/wide" --output "$work/x.h5"
mkdir -p "$work/noweights" && cp "$work/hf/config.json" "$work/noweights/"
expect_bad_input "model.safetensors': missing" "$ckpt" import --format hf "$work/noweights" --output "$work/x.h5"
expect_bad_input "--format must be safetensors, llmc or hf" "$ckpt" export "$checkpoint" --format onnx --output "$work/x"
test ! -e "$work/x.h5"
echo "OK"
