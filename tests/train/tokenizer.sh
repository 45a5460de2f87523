#!/usr/bin/env bash
# A SentencePiece tokenizer through every tool (issue 37): hsdp-data tokenizer train on this repository's docs,
# encode with the validation part as whole documents, hsdp-train with data.tokenizer (2 ranks), then:
# - the checkpoint records the tokenizer's identity (hsdp-ckpt inspect) and a resume without it is refused with exit
#   2 and one line, leaving the checkpoint as it was;
# - hsdp-sample takes the tokenizer from the run's deck, encodes the prompt and decodes the text after it;
# - hsdp-ckpt export --format hf writes the model file as tokenizer.model (the same bytes) and tokenizer_config.json.
#   tokenizer.sh HSDP_TRAIN HSDP_DATA HSDP_SAMPLE HSDP_CKPT REPO WORK MPIRUN...
set -euo pipefail
train=$1 data=$2 sample=$3 ckpt=$4 repo=$5 work=$6
shift 6
mpirun=("$@")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
cat "$repo"/README.md "$repo"/docs/*.md >corpus.txt
"$data" tokenizer train --input corpus.txt --out tok/spm --vocab-size 1000 --type bpe || fail "tokenizer train"
"$data" encode --input corpus.txt --tokenizer tok/spm.model --output data/train.bin --val-output data/val.bin \
  --val-split documents --val-fraction 0.05 --seed 3 | tee encode.log
grep -q "held out for validation (seed 3)" encode.log || fail "no documents held out"
keys=(--config "$repo/input/own_text.ini" --data.train=data/train.bin --data.val=data/val.bin --data.entropy_json=
      --model.vocab_size=1000 --model.padded_vocab_size=0 --train.eval_every=10 --log.every=10 --device.threads=1
      --topology.ranks_per_node=1 --log.dir=run/log --checkpoint.dir=run/ckpt --checkpoint.every=0)
"${mpirun[@]}" -np 2 "$train" "${keys[@]}" --data.tokenizer=tok/spm.model --train.steps=20 >train.log 2>&1 ||
  { cat train.log >&2; fail "hsdp-train"; }
identity=$("$ckpt" inspect run/ckpt | grep -o 'tokenizer sentencepiece:[0-9a-f]*' | cut -d' ' -f2)
[[ -n $identity ]] || fail "hsdp-ckpt inspect names no sentencepiece tokenizer"
before=$(sha256sum run/ckpt/step_20.h5)
set +e
"${mpirun[@]}" -np 2 "$train" "${keys[@]}" --train.steps=30 --log.overwrite=true >refused.log 2>&1
code=$?
set -e
[[ $code == 2 ]] || { cat refused.log >&2; fail "a resume without the tokenizer: exit $code, not 2"; }
[[ $(grep -c "hsdp-train: config error: resume: the checkpoint's run was trained on token ids of tokenizer $identity" \
  refused.log) == 1 ]] || { cat refused.log >&2; fail "not one line naming the tokenizer"; }
[[ $(sha256sum run/ckpt/step_20.h5) == "$before" ]] || fail "the refused resume changed the checkpoint"
"$sample" run/ckpt --prompt "The checkpoint" --max-new-tokens 20 --seed 1 >sample.txt || fail "hsdp-sample"
[[ $(head -c 14 sample.txt) == "The checkpoint" ]] || fail "the sample does not start with the prompt: $(cat sample.txt)"
[[ $(wc -c <sample.txt) -gt 20 ]] || fail "nothing generated after the prompt"
"$ckpt" export run/ckpt --format hf --output hf >export.log || fail "export"
cmp hf/tokenizer.model tok/spm.model || fail "tokenizer.model differs from the model file"
grep -q '"tokenizer_class": "LlamaTokenizer"' hf/tokenizer_config.json || fail "tokenizer_config.json"
echo "tokenizer $identity: trained, recorded, refused on a resume without it, sampled ($(head -c 60 sample.txt | tr '\n' ' ')...), exported"
