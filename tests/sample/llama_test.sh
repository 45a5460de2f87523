#!/usr/bin/env bash
# A Llama (model.arch=llama) trained by hsdp, exported to Hugging Face's LlamaForCausalLM layout, against an
# independent plain-Python Llama (llama_reference.py) that reads only that export:
#  1. the logits of hsdp's forward (hsdp-sample --print-logits) equal the reference's within 1e-5 relative to the
#     largest logit (float32 against float64: a few float32 roundings, ~1e-7, are expected);
#  2. hsdp-sample's 12 greedy tokens, with the key/value cache (RoPE at the cached positions) and without, equal the
#     reference's greedy decode (which recomputes the whole sequence for every token);
#  3. export -> import -> export gives the same bytes, and the imported deck trains as a Llama;
# for an untied head with grouped-query attention (4 query heads over 2 key/value heads) and a tied head with
# multi-head attention. Then: llm.c's format refuses a Llama, a directory with rope_scaling is refused; exit 2, one
# line each.
#   llama_test.sh HSDP_TRAIN HSDP_SAMPLE HSDP_CKPT PYTHON REFERENCE DECK DATA WORK
set -euo pipefail
train=$1 sample=$2 ckpt=$3 python=$4 reference=$5 deck=$6 data=$7 work=$8
source "$(dirname "$0")/expect.sh"
rm -rf "$work" && mkdir -p "$work"
prompt=5,17,3,42,8,1,0,63,12,33

for variant in gqa_untied mha_tied; do
  dir=$work/$variant
  keys=(--model.n_layer=2 --model.n_embd=64 --model.n_head=4 --model.ffn_dim=192 --model.padded_vocab_size=128)
  if [[ $variant == gqa_untied ]]; then
    keys+=(--model.n_kv_head=2)
  else
    keys+=(--model.n_kv_head=0 --model.tie_embeddings=true)
  fi
  "$train" --config "$deck" "${keys[@]}" --data.train="$data/train.bin" --data.val="$data/val.bin" \
    --data.entropy_json="$data/source.json" --parallel.sharding=no_shard --train.steps=150 --train.eval_every=0 \
    --log.every=50 --checkpoint.dir="$dir/run" --log.dir="$dir/log" >/dev/null
  checkpoint=$dir/run/step_150.h5
  "$ckpt" export "$checkpoint" --format hf --output "$dir/hf" >/dev/null
  grep -q '"model_type": "llama"' "$dir/hf/config.json"
  "$sample" "$checkpoint" --prompt-ids "$prompt" --print-logits >"$dir/hsdp_logits.txt"
  "$python" "$reference" compare "$dir/hf" "$prompt" "$dir/hsdp_logits.txt" 1e-5
  expected=$("$python" "$reference" greedy "$dir/hf" "$prompt" 12)
  cached=$("$sample" "$checkpoint" --prompt-ids "$prompt" --temperature 0 --max-new-tokens 12 --output ids)
  full=$("$sample" "$checkpoint" --prompt-ids "$prompt" --temperature 0 --max-new-tokens 12 --output ids --no-kv-cache)
  echo "$variant: python greedy $expected; hsdp-sample with cache $cached, without $full"
  [[ $cached == "$expected" && $full == "$expected" ]] || { echo "FAIL: $variant: greedy tokens differ"; exit 1; }

  "$ckpt" import --format hf "$dir/hf" --output "$dir/imported.h5" >/dev/null
  "$ckpt" export "$dir/imported.h5" --format hf --output "$dir/hf_again" >/dev/null
  cmp "$dir/hf/model.safetensors" "$dir/hf_again/model.safetensors"
  cmp "$dir/hf/config.json" "$dir/hf_again/config.json"
  "$ckpt" inspect "$dir/imported.h5" --summary | grep -q "model llama"
  "$train" --config "$deck" "${keys[@]}" --data.train="$data/train.bin" --data.val="$data/val.bin" \
    --data.entropy_json="$data/source.json" --parallel.sharding=no_shard --train.steps=2 --train.eval_every=0 \
    --checkpoint.resume="$dir/imported.h5" --checkpoint.dir="$dir/resumed" --log.dir="$dir/resumed_log" >/dev/null
  echo "$variant: hf export -> import -> export: the same bytes; the import resumes as a Llama"
done

dir=$work/gqa_untied
expect_bad_input "llm.c's model file holds GPT-2 only" "$ckpt" export "$dir/run/step_150.h5" --format llmc \
  --output "$work/x.bin"
mkdir -p "$work/scaled" && cp "$dir/hf/model.safetensors" "$work/scaled/"
sed 's/"rope_scaling": null/"rope_scaling": {"type": "linear", "factor": 2.0}/' "$dir/hf/config.json" \
  >"$work/scaled/config.json"
expect_bad_input "'rope_scaling' is set" "$ckpt" import --format hf "$work/scaled" --output "$work/x.h5"
test ! -e "$work/x.h5" && test ! -e "$work/x.bin"
echo "OK"
