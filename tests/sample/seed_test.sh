#!/usr/bin/env bash
# Seeded sampling: the same seed gives the same text, another seed (temperature 1) other text; a text prompt is
# encoded as hsdp-data encode does (one token per byte); generation past block_size (the context window slides)
# gives the same tokens with the key/value cache and with a full forward per token.
#   seed_test.sh HSDP_SAMPLE HSDP_DATA MODEL_DIR WORK
set -euo pipefail
sample=$1 data=$2 model=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
checkpoint=$model/one_rank/step_40.h5
run() { "$sample" "$checkpoint" --output ids "$@"; }
a=$(run --prompt-ids 5,6,7 --max-new-tokens 48 --seed 1)
b=$(run --prompt-ids 5,6,7 --max-new-tokens 48 --seed 1)
c=$(run --prompt-ids 5,6,7 --max-new-tokens 48 --seed 2)
echo "seed 1: $a"
echo "seed 1: $b"
echo "seed 2: $c"
[[ $a == "$b" ]] || { echo "FAIL: the same seed gave different tokens"; exit 1; }
[[ $a != "$c" ]] || { echo "FAIL: seeds 1 and 2 gave the same 48 tokens"; exit 1; }
[[ $(run --prompt-ids 5,6,7 --max-new-tokens 16 --seed 1 --top-k 1) == $(run --prompt-ids 5,6,7 --max-new-tokens 16 --temperature 0) ]] ||
  { echo "FAIL: top-k 1 is not greedy"; exit 1; }

# "09:" is bytes 48, 57, 58: all inside the quickstart's vocabulary of 64. hsdp-data encode writes the same ids.
printf '09:' >"$work/prompt.txt"
"$data" encode --input "$work/prompt.txt" --output "$work/prompt.bin" >/dev/null
encoded=$(od -An -t u2 -j 1024 -v "$work/prompt.bin" | xargs | tr ' ' ',')
[[ $encoded == 48,57,58 ]] || { echo "FAIL: hsdp-data encode gave $encoded"; exit 1; }
[[ $(run --prompt '09:' --max-new-tokens 16 --seed 4) == $(run --prompt-ids "$encoded" --max-new-tokens 16 --seed 4) ]] ||
  { echo "FAIL: the text prompt is not its byte ids"; exit 1; }
text=$("$sample" "$checkpoint" --prompt '09:' --max-new-tokens 8 --seed 4 | od -An -t u1 | xargs | tr ' ' ',')
ids=$(run --prompt-ids 48,57,58 --seed 4 --max-new-tokens 8)
[[ $text == "48,57,58,$ids,10" ]] || { echo "FAIL: --output text wrote $text, expected the prompt, $ids, newline"; exit 1; }

# 200 tokens after a prompt of 60 pass block_size (64) several times.
prompt=$(seq -s, 0 59)
cached=$("$sample" "$checkpoint" --prompt-ids "$prompt" --max-new-tokens 200 --output ids --seed 9 --stats)
full=$("$sample" "$checkpoint" --prompt-ids "$prompt" --max-new-tokens 200 --output ids --seed 9 --no-kv-cache --stats)
[[ $cached == "$full" ]] || { echo "FAIL: past block_size the cached and full-forward tokens differ"; exit 1; }
echo "OK: 200 tokens past block_size agree with and without the key/value cache"
