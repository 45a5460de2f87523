#!/usr/bin/env bash
# The fuzz suite's fixtures, in OUT:
#   data/train.bin, data/val.bin     token files of the fuzz model (vocabulary 64), from a fixed seed
#   seeds/token_file/*.bin           small valid token files: the token-file harness's seeds
#   good/step_2.h5, good/latest      a 2-step checkpoint of the fuzz model (checkpoint_harness.cpp's shape) trained
#                                    by hsdp-train: the checkpoint harness's seed and the e2e suite's good checkpoint
#   seeds/safetensors/*              that checkpoint exported by hsdp-ckpt (beside hsdp-train), and a two-tensor file
#   make_fixtures.sh HSDP_TRAIN DECK OUT
set -euo pipefail
train=$1 deck=$2 out=$3
rm -rf "$out" && mkdir -p "$out/data" "$out/seeds/token_file" "$out/seeds/checkpoint" "$out/seeds/safetensors"
python3 - "$out" <<'EOF'
import random, struct, sys
out = sys.argv[1]
rng = random.Random(20240520)
def token_file(path, count):
    # A Markov-ish walk over 64 tokens, so that the model has something to learn.
    tokens, t = [], 0
    for _ in range(count):
        t = (t * 5 + rng.choice((1, 2, 3))) % 64
        tokens.append(t)
    header = [20240520, 1, count] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % count, *tokens))
token_file(out + "/data/train.bin", 8192)
token_file(out + "/data/val.bin", 2048)
token_file(out + "/seeds/token_file/one_global_batch.bin", 8 * 16 + 1)  # 4 ranks x batch 2 x seq_len 16, + 1
token_file(out + "/seeds/token_file/small.bin", 400)
token_file(out + "/seeds/token_file/medium.bin", 1500)
EOF
"$train" --config "$deck" --data.train="$out/data/train.bin" --data.val="$out/data/val.bin" --parallel.sharding=no_shard \
  --train.steps=2 --checkpoint.dir="$out/good" --log.dir="$out/log" >"$out/good_run.log"
[[ $(cat "$out/good/latest") == step_2.h5 ]] || { echo "the good run left no step_2.h5"; exit 1; }
cp "$out/good/step_2.h5" "$out/seeds/checkpoint/step_2.h5"
"$(dirname "$train")/hsdp-ckpt" export "$out/good/step_2.h5" --format safetensors \
  --output "$out/seeds/safetensors/step_2.safetensors" >/dev/null
python3 - "$out/seeds/safetensors/two.safetensors" <<'EOF'
import json, struct, sys
header = json.dumps({"__metadata__": {"format": "pt"},
                     "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                     "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]}}).encode()
header += b" " * (-len(header) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1, 2, 3, 4) + bytes(6))
EOF
echo "fixtures in $out: $(ls "$out/seeds/token_file" | wc -l) token-file seeds, checkpoint $(stat -c %s "$out/good/step_2.h5") bytes"
