#!/usr/bin/env bash
# Bad checkpoints given to hsdp-train (issue 6): a truncated file, a byte flipped inside a dataset, and a checkpoint
# of another model shape must each end with exit code 2 and one line naming the file (and the dataset, where the
# damage is in one); the checkpoint itself stays untouched.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4
rm -rf "$run" && mkdir -p "$run"
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.eval_every=0 --log.every=100 --log.dir="$run/log" --train.micro_batch=8)
"$train" "${common[@]}" --train.steps=2 --checkpoint.dir="$run/good" >/dev/null
good=$run/good/step_2.h5
size=$(stat -c %s "$good")

expect() {  # expect NAME TEXT... -- ARGS: exit 2, stderr one line containing every TEXT
  local name=$1; shift
  local texts=()
  while [[ $1 != -- ]]; do texts+=("$1"); shift; done
  shift
  set +e
  "$train" "${common[@]}" --train.steps=4 "$@" >"$run/$name.out" 2>"$run/$name.err"
  local code=$?
  set -e
  [[ $code -eq 2 ]] || { echo "$name: exit $code, expected 2"; cat "$run/$name.err"; exit 1; }
  [[ $(wc -l <"$run/$name.err") -eq 1 ]] || { echo "$name: expected one line on stderr"; cat "$run/$name.err"; exit 1; }
  for t in "${texts[@]}"; do
    grep -qF -- "$t" "$run/$name.err" || { echo "$name: message lacks '$t'"; cat "$run/$name.err"; exit 1; }
  done
  echo "$name: $(cat "$run/$name.err")"
}

head -c $((size / 2)) "$good" >"$run/truncated.h5"
expect truncated "$run/truncated.h5" -- --checkpoint.resume="$run/truncated.h5"

cp "$good" "$run/flipped.h5"
offset=$(h5dump -H -p -d /model/transformer.h.1.mlp.c_fc.weight "$good" | awk '/OFFSET/ {print $2}')
byte=$(od -An -tu1 -j $((offset + 100)) -N1 "$run/flipped.h5" | tr -d ' ')
printf "\\x$(printf %02x $((byte ^ 0xff)))" | dd of="$run/flipped.h5" bs=1 seek=$((offset + 100)) conv=notrunc status=none
expect flipped "$run/flipped.h5" "transformer.h.1.mlp.c_fc.weight" -- --checkpoint.resume="$run/flipped.h5"

expect other_shape "$good" "was written for another model shape" "the model is n_layer 4, n_head 4, n_embd 64" -- \
  --checkpoint.resume="$good" --model.n_embd=64

sha_before=$(sha256sum "$good" | cut -d' ' -f1)
"$train" "${common[@]}" --train.steps=2 --checkpoint.resume="$good" --checkpoint.dir="$run/other" >/dev/null
[[ $(sha256sum "$good" | cut -d' ' -f1) == "$sha_before" ]] || { echo "the good checkpoint changed"; exit 1; }
echo "the good checkpoint is unchanged"
