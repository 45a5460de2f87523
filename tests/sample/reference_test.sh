#!/usr/bin/env bash
# hsdp-sample against an independent numpy GPT-2 (gpt2_reference.py) that reads only the Hugging Face export:
#  1. the logits of hsdp's forward (hsdp-sample --print-logits) equal the reference's within 1e-5, relative to the
#     largest logit (float32 against float64: the expected difference is a few float32 roundings, ~1e-7);
#  2. hsdp-sample's first 16 greedy tokens, with the key/value cache and without, equal the reference's greedy decode
#     (which recomputes the whole sequence for every token).
#   reference_test.sh HSDP_SAMPLE HSDP_CKPT PYTHON REFERENCE MODEL_DIR WORK
set -euo pipefail
sample=$1 ckpt=$2 python=$3 reference=$4 model=$5 work=$6
source "$(dirname "$0")/expect.sh"
python=$(python_with_numpy "$python")
rm -rf "$work" && mkdir -p "$work"
checkpoint=$model/one_rank/step_40.h5
"$ckpt" export "$checkpoint" --format hf --output "$work/hf" >/dev/null
prompt=5,17,3,42,8,1,0,63,12,33
"$sample" "$checkpoint" --prompt-ids "$prompt" --print-logits >"$work/hsdp_logits.txt"
"$python" "$reference" compare "$work/hf" "$prompt" "$work/hsdp_logits.txt" 1e-5
expected=$("$python" "$reference" greedy "$work/hf" "$prompt" 16)
cached=$("$sample" "$checkpoint" --prompt-ids "$prompt" --temperature 0 --max-new-tokens 16 --output ids)
full=$("$sample" "$checkpoint" --prompt-ids "$prompt" --temperature 0 --max-new-tokens 16 --output ids --no-kv-cache)
echo "numpy greedy:            $expected"
echo "hsdp-sample (kv cache):  $cached"
echo "hsdp-sample (no cache):  $full"
[[ $cached == "$expected" && $full == "$expected" ]] || { echo "FAIL: greedy tokens differ"; exit 1; }
echo "OK: logits and 16 greedy tokens agree with the numpy reference"
