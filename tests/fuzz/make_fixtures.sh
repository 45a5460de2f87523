#!/usr/bin/env bash
# The fuzz suite's fixtures, in OUT:
#   data/train.bin, data/val.bin     token files of the fuzz model (vocabulary 64), from a fixed seed
#   seeds/token_file/*.bin           small valid token files: the token-file harness's seeds
#   good/step_2.h5, good/latest      a 2-step checkpoint of the fuzz model (checkpoint_harness.cpp's shape) trained
#                                    by hsdp-train: the checkpoint harness's seed and the e2e suite's good checkpoint
#   seeds/safetensors/*              that checkpoint exported by hsdp-ckpt (beside hsdp-train), and a two-tensor file
#   seeds/checkpoint_meta/*          edits of that checkpoint's metadata values (checkpoint_meta_harness.cpp)
#   seeds/deck/print_config.ini      every deck key with its default and its comment (`hsdp-train --print-config`):
#                                    the deck harness's seed that follows the keys as they are added
#   dict/deck_keys.dict              its section headers and keys as deck lines and command-line words: the deck
#                                    harness's dictionary beside tests/fuzz/dict/deck.dict
#   make_fixtures.sh HSDP_TRAIN DECK OUT
set -euo pipefail
train=$1 deck=$2 out=$3
rm -rf "$out" && mkdir -p "$out/data" "$out/seeds/token_file" "$out/seeds/checkpoint" "$out/seeds/safetensors" \
  "$out/seeds/deck"
"$train" --print-config >"$out/seeds/deck/print_config.ini"
mkdir -p "$out/dict"
awk '/^\[/ { section = substr($1, 2, length($1) - 2); print "\"" $1 "\""; next }
     /^[a-z]/ { print "\"" $1 "\""; print "\"" section "." $1 "\""; print "\"\\x00--" section "." $1 "=\"" }' \
  "$out/seeds/deck/print_config.ini" >"$out/dict/deck_keys.dict"
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
# The metadata harness's seeds (checkpoint_meta_harness.cpp): edits of 11 bytes (attribute, operation, flags, value).
mkdir -p "$out/seeds/checkpoint_meta"
python3 - "$out/seeds/checkpoint_meta" <<'EOF'
import struct, sys
out = sys.argv[1]
def edit(target, op, flags, value):
    return bytes([target, op, flags]) + struct.pack("<Q", value & (2**64 - 1))
# Operations: 0 same, 1 int64, 2 int64 at a limit, 3 real, 4 real at a limit, 5 uint64, 6 string, 7 remove, 8 pair.
# Every seed is a file the readers accept; the mutations make the rest.
seeds = {}
for target in range(24):
    seeds["same_%02d" % target] = edit(target, 0, 0, 0)
    seeds["forged_same_%02d" % target] = edit(target, 0, 1, 0)
seeds["forged_step_5"] = edit(0, 2, 1, 5)
seeds["forged_tokens_39"] = edit(1, 2, 1, 6)
seeds["forged_train_seconds"] = edit(7, 4, 1, 10)
seeds["forged_segments_3"] = edit(8, 2, 1, 4)
seeds["forged_epoch_3"] = edit(19, 5, 1, 3)
seeds["forged_scale"] = edit(21, 4, 1, 7)
seeds["forged_good_steps"] = edit(22, 2, 1, 6)
seeds["hsdp_version"] = edit(17, 6, 0, 0x78)
seeds["removed_checksum"] = edit(16, 7, 0, 0)
seeds["step_and_tokens"] = edit(0, 2, 0, 4) + edit(1, 2, 1, 6)      # two edits, then the checksum recomputed
for name, data in seeds.items():
    with open("%s/%s" % (out, name), "wb") as f:
        f.write(data)
EOF
echo "fixtures in $out: $(ls "$out/seeds/token_file" | wc -l) token-file seeds, checkpoint $(stat -c %s "$out/good/step_2.h5") bytes"
