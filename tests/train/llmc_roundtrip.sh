#!/usr/bin/env bash
# llm.c interchange (issue 6): a trained hsdp checkpoint is exported to llm.c's GPT-2 model file; that file imported,
# evaluated and exported again gives back the same bytes, and hsdp's val loss on the imported model equals the loss
# before export within 1e-5 (relative).
set -euo pipefail
train=$1 ckpt=$2 deck=$3 data=$4 run=$5
rm -rf "$run" && mkdir -p "$run"
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json="$data/source.json"
        --train.micro_batch=8 --train.eval_tokens=4096 --log.every=100)
"$train" "${common[@]}" --train.steps=5 --train.eval_every=0 --checkpoint.dir="$run/trained" --log.dir="$run/log_train" >/dev/null
"$train" "${common[@]}" --train.eval_only=true --checkpoint.resume="$run/trained/step_5.h5" --log.dir="$run/log_before" >/dev/null
"$ckpt" export "$run/trained/step_5.h5" --format llmc --output "$run/model.bin" >/dev/null
"$ckpt" import --format llmc "$run/model.bin" --output "$run/imported.h5" >/dev/null
"$train" "${common[@]}" --train.eval_only=true --checkpoint.resume="$run/imported.h5" --log.dir="$run/log_after" >/dev/null
"$ckpt" export "$run/imported.h5" --format llmc --output "$run/model_again.bin" >/dev/null
cmp "$run/model.bin" "$run/model_again.bin"
echo "llm.c file: import + export gives the same $(stat -c %s "$run/model.bin") bytes"
# eval_only writes eval_step_<N>.json (never summary.json): one file in each log dir.
python3 - "$run/log_before" "$run/log_after" <<'PY'
import glob, json, sys
def loss(log_dir):
    files = glob.glob(log_dir + "/eval_step_*.json")
    assert len(files) == 1 and not glob.glob(log_dir + "/summary.json"), (log_dir, files)
    return json.load(open(files[0]))["final_val_loss"]
a, b = (loss(d) for d in sys.argv[1:3])
rel = abs(a - b) / a
print(f"val loss before export {a!r}, after llm.c export and import {b!r}: relative difference {rel:.2e} (<= 1e-5)")
sys.exit(0 if rel <= 1e-5 else 1)
PY
