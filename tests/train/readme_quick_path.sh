#!/usr/bin/env bash
# The README's quick path, as written (issue 37): every fenced block of README.md marked `<!-- quick path -->` runs in
# order, in a directory that holds this repository's README.md, docs/ and input/ and the build's programs under
# build/bin (as a fresh clone after tools/quickstart.sh does), with `mpirun` taking --allow-run-as-root
# --oversubscribe as the README says root needs. Those blocks train on text twice (bytes, then a SentencePiece
# tokenizer) and sample; checked:
# - the byte-level run's final val loss is under 0.6 x the byte unigram entropy of its val text (computed here): the
#   model predicts from context, not from letter frequencies alone (a unigram model reaches exactly that entropy);
# - the SentencePiece run trained its 320 steps with the tokenizer recorded in its checkpoint (hsdp-ckpt inspect); a
#   resume without it is refused with exit 2 in one line, the checkpoint untouched; the Hugging Face export writes the
#   model file as tokenizer.model (the same bytes) and tokenizer_config.json, and its import records that tokenizer,
#   from which a fine-tune with it resumes;
# - both models' samples read as the corpus's language: at least 60% of their words (letter runs of 2 or more,
#   lowercased) are words of the corpus (ids or mostly invented words fail). Four samples (seeds 1-4) pooled per
#   model: one sample of ~45 words has a binomial spread of about +-6%, four pooled about +-3%.
#   readme_quick_path.sh BIN_DIR REPO WORK MPIRUN
set -euo pipefail
bin=$1 repo=$2 work=$3 real_mpirun=$4
rm -rf "$work"
mkdir -p "$work/build" "$work/shim"
ln -s "$bin" "$work/build/bin"
cp -r "$repo/README.md" "$repo/docs" "$repo/input" "$work/"
cat >"$work/shim/mpirun" <<SHIM
#!/usr/bin/env bash
exec "$real_mpirun" --allow-run-as-root --oversubscribe "\$@"
SHIM
chmod +x "$work/shim/mpirun"
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 - README.md >quick_path.sh <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
blocks, i = 0, 0
while i < len(lines):
    if lines[i].strip() == "<!-- quick path -->":
        assert lines[i + 1].startswith("```sh"), f"line {i + 2}: a quick-path marker not before a sh block"
        i += 2
        while not lines[i].startswith("```"):
            print(lines[i])
            i += 1
        blocks += 1
    i += 1
assert blocks >= 2, f"{blocks} quick-path blocks"
print(f"echo 'quick path: {blocks} blocks ran'")
PY
cat quick_path.sh
PATH=$work/shim:$PATH OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 bash -euo pipefail quick_path.sh >quick_path.log 2>&1 ||
  { tail -n 30 quick_path.log >&2; fail "a README quick-path command failed"; }
grep -E "^quick path|val loss|done:" quick_path.log
for seed in 1 2 3 4; do
  build/bin/hsdp-sample runs/text/checkpoints --prompt "This program is free software" --max-new-tokens 300 \
    --temperature 0.8 --top-k 40 --seed "$seed" >"bytes_$seed.txt" || fail "hsdp-sample --seed $seed"
  build/bin/hsdp-sample runs/text_spm/checkpoints --prompt "This program is free software" --max-new-tokens 100 \
    --temperature 0.8 --top-k 40 --seed "$seed" >"spm_$seed.txt" || fail "hsdp-sample (SentencePiece) --seed $seed"
done
cat bytes_1.txt spm_1.txt
# The tokenizer through the other tools: recorded in the checkpoint (inspect), a resume without it refused in one line
# with the checkpoint untouched, the Hugging Face export writing its model file.
build/bin/hsdp-ckpt inspect runs/text_spm/checkpoints >inspect.txt || fail "hsdp-ckpt inspect"
identity=$(grep -o 'tokenizer sentencepiece:[0-9a-f]*' inspect.txt | cut -d' ' -f2)
[[ -n $identity ]] || fail "the SentencePiece run's checkpoint does not record its tokenizer"
before=$(sha256sum runs/text_spm/checkpoints/step_320.h5)
set +e
PATH=$work/shim:$PATH OMP_NUM_THREADS=1 mpirun -np 2 build/bin/hsdp-train --config input/own_text.ini \
  --data.train=data/text/spm_train.bin --data.val=data/text/spm_val.bin --model.vocab_size=2048 \
  --model.padded_vocab_size=2048 --train.steps=330 --log.dir=runs/text_spm --checkpoint.dir=runs/text_spm/checkpoints \
  >refused.log 2>&1
code=$?
set -e
[[ $code == 2 ]] || { cat refused.log >&2; fail "a resume without the tokenizer: exit $code, not 2"; }
[[ $(grep -c "config error: resume: the checkpoint's run was trained on token ids of tokenizer $identity" \
  refused.log) == 1 ]] || { cat refused.log >&2; fail "not one line naming the tokenizer"; }
[[ $(sha256sum runs/text_spm/checkpoints/step_320.h5) == "$before" ]] || fail "the refused resume changed the checkpoint"
build/bin/hsdp-ckpt export runs/text_spm/checkpoints --format hf --output hf >export.log || fail "export"
cmp hf/tokenizer.model data/text/spm.model || fail "tokenizer.model differs from the model file"
grep -q '"tokenizer_class": "LlamaTokenizer"' hf/tokenizer_config.json || fail "tokenizer_config.json"
# Imported back, the model records that tokenizer, and a fine-tune with it resumes from the import.
build/bin/hsdp-ckpt import --format hf hf --output imported/step_0.h5 >import.log || fail "import"
grep -q "tokenizer $identity (hf/tokenizer.model)" import.log || { cat import.log >&2; fail "the import lost the tokenizer"; }
PATH=$work/shim:$PATH OMP_NUM_THREADS=1 mpirun -np 1 build/bin/hsdp-train --config input/own_text.ini \
  --data.tokenizer=data/text/spm.model --data.train=data/text/spm_train.bin --data.val=data/text/spm_val.bin \
  --model.vocab_size=2048 --model.padded_vocab_size=2048 --train.steps=2 --train.eval_every=0 \
  --log.dir=runs/fine_tune --checkpoint.dir=runs/fine_tune/checkpoints --checkpoint.resume=imported/step_0.h5 \
  >fine_tune.log 2>&1 || { cat fine_tune.log >&2; fail "a fine-tune from the imported model with its tokenizer"; }
python3 - data/text/corpus.txt runs/text/summary.json runs/text_spm/summary.json <<'PY'
import collections, json, math, re, sys
text = open(sys.argv[1], "rb").read()
val = text[len(text) - round(0.05 * len(text)):]
counts = collections.Counter(val)
unigram = -sum(c / len(val) * math.log(c / len(val)) for c in counts.values())
summary = json.load(open(sys.argv[2]))
loss = summary["final_val_loss"]
print(f"bytes: val loss {loss:.3f} nats/byte at step {summary['final_val_loss_step']}; val unigram entropy {unigram:.3f}")
assert summary["final_val_loss_step"] == 1000 and loss < 0.6 * unigram, (loss, unigram)
spm = json.load(open(sys.argv[3]))
print(f"SentencePiece: val loss {spm['final_val_loss']:.3f} nats/piece at step {spm['final_val_loss_step']}")
assert spm["final_val_loss_step"] == 320, spm["final_val_loss_step"]
known = set(re.findall(rb"[a-z]{2,}", text.lower()))
prompt = b"this program is free software"
for kind in ("bytes", "spm"):
    words = [w for s in range(1, 5) for w in re.findall(rb"[a-z]{2,}", open(f"{kind}_{s}.txt", "rb").read().lower()[len(prompt):])]
    share = sum(w in known for w in words) / max(1, len(words))
    print(f"{kind} samples: {len(words)} words, {share:.0%} of them words of the corpus")
    assert len(words) >= 80 and share >= 0.6, (kind, len(words), share)
PY
echo PASS
