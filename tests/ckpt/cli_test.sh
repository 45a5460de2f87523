#!/usr/bin/env bash
# hsdp-ckpt end to end: help, inspect, verify, consolidate, export (llmc, safetensors), import; the llm.c byte
# round trip (import then export gives back the same bytes); bad input exits 2 with one line naming the problem.
#   cli_test.sh HSDP_CKPT PROBE MPIEXEC...
set -uo pipefail
bin=$1 probe=$2
shift 2
mpiexec=("$@")
dir=$(mktemp -d "${TMPDIR:-/tmp}/hsdp_ckpt_cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect CODE PATTERN CMD...: runs CMD, checks its exit code and that its output matches PATTERN.
expect() {
  local code=$1 pattern=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  [[ $rc -eq $code ]] || fail "'$*' exited $rc, expected $code: $out"
  grep -qE -- "$pattern" <<<"$out" || fail "'$*' output lacks /$pattern/: $out"
  if [[ $code -eq 2 && $(wc -l <<<"$out") -ne 1 ]]; then fail "'$*' error is not one line: $out"; fi
}

expect 0 'commands:' "$bin" --help
for command in inspect verify consolidate export import; do
  expect 0 "usage: hsdp-ckpt $command" "$bin" "$command" --help
done
expect 0 'load_state_dict' "$bin" export --help
expect 2 'missing command' "$bin"
expect 2 "unknown command 'frobnicate'" "$bin" frobnicate
expect 2 "'--file' is required|the option '--file' is required" "$bin" inspect
expect 2 "unrecognised option '--bogus'" "$bin" verify --bogus
expect 2 "'--output' is required" "$bin" export "$dir/x.h5" --format llmc
expect 2 "--format must be safetensors, llmc or hf, got 'onnx'" "$bin" export "$dir/x.h5" --format onnx --output "$dir/o"
expect 2 "checkpoint '.*absent.h5' cannot be opened|does not exist" "$bin" inspect "$dir/absent.h5"

# llm.c -> checkpoint -> llm.c: the same bytes.
"$probe" make-llmc "$dir/model.bin" || fail "ckpt_probe make-llmc"
expect 0 "wrote .*step_0.h5: step 0, n_layer 2, n_head 2, n_embd 16" \
  "$bin" import --format llmc "$dir/model.bin" --output "$dir/imported/step_0.h5"
expect 0 "OK .*step_0.h5: step 0, 84 datasets" "$bin" verify "$dir/imported/step_0.h5"
expect 0 "strategy imported" "$bin" inspect "$dir/imported/step_0.h5" --summary
# An independent HDF5 reader sees the deck and the logical shapes (hdf5-tools).
if command -v h5dump >/dev/null; then
  expect 0 "n_layer = 2" h5dump -a /meta/deck "$dir/imported/step_0.h5"
  expect 0 "DATASPACE  SIMPLE \{ \( 50, 16 \)" h5dump -H -d /model/transformer.wte.weight "$dir/imported/step_0.h5"
else
  echo "note: h5dump not installed (hdf5-tools); skipped the independent HDF5 reader checks"
fi
expect 0 "wrote .*back.bin \(llmc\)" "$bin" export "$dir/imported/step_0.h5" --format llmc --output "$dir/back.bin"
cmp "$dir/model.bin" "$dir/back.bin" || fail "llm.c round trip changed the bytes"
expect 2 "version 5 holds bf16" bash -c "printf '\xc6\xd7\x34\x01\x05\x00\x00\x00' | cat - <(head -c 2000 /dev/zero) \
  > '$dir/v5.bin' && '$bin' import --format llmc '$dir/v5.bin' --output '$dir/v5.h5'"
expect 2 "holds [0-9]+ bytes but its header describes" bash -c "head -c 5000 '$dir/model.bin' > '$dir/cut.bin' && \
  '$bin' import --format llmc '$dir/cut.bin' --output '$dir/cut.h5'"
# A header with 2^30 layers (issue 25, item 4): refused by its numbers within seconds (it ran for minutes building the
# layout, then bad_alloc).
python3 -c "
import struct, sys
h = [0] * 256
h[:8] = [20240326, 3, 1024, 50257, 2**30, 16, 2**20, 50304]
open(sys.argv[1], 'wb').write(struct.pack('<256i', *h) + bytes(64))" "$dir/huge.bin"
expect 2 "impossible model: model.n_layer \(1073741824\) exceeds 1024" timeout 20 \
  "$bin" import --format llmc "$dir/huge.bin" --output "$dir/huge.h5"

# A 4-rank checkpoint with replicated ranges: inspect, verify, consolidate to one rank, same values.
"${mpiexec[@]}" "$probe" save "$dir/run" 12 replicas >/dev/null || fail "4-rank save"
ck=$dir/run/step_12.h5
expect 0 "saved by 4 rank\(s\) on 2 node\(s\), mesh 2x2, strategy full_shard" "$bin" inspect "$ck"
expect 0 "transformer.h.1.mlp.c_proj.weight +\[16, 64\]" "$bin" inspect "$ck"
expect 0 "/optim/exp_avg_sq/" "$bin" inspect "$ck"
expect 0 "OK .*step_12.h5" "$bin" verify "$ck"
expect 0 "wrote .*one.h5: step 12, world_size 1" "$bin" consolidate "$ck" --output "$dir/one.h5"
# No output over a checkpoint (an HDF5 file), whichever command writes it; a regular file of another kind is replaced.
before=$(sha256sum <"$dir/one.h5")
expect 2 "--output: '$dir/one.h5' is an HDF5 file \(a checkpoint\?\), which hsdp-ckpt never writes over" \
  "$bin" consolidate "$ck" --output "$dir/one.h5"
expect 2 "is an HDF5 file" "$bin" export "$ck" --format llmc --output "$dir/one.h5"
expect 2 "is an HDF5 file" "$bin" import --format llmc "$dir/model.bin" --output "$dir/one.h5"
[[ $(sha256sum <"$dir/one.h5") == "$before" ]] || fail "a refused --output changed the checkpoint"
# Nor over its own input, a checkpoint directory's `latest`, or into one; every file of an hf export is checked
# before anything is written.
expect 2 "--output '.*model.bin' is the file --input names" "$bin" import --format llmc "$dir/model.bin" \
  --output "$dir/./model.bin"
# Nor over its input through the temporary file it writes first ("<output>.tmp").
cp "$dir/model.bin" "$dir/m.bin.tmp"
expect 2 "--output's temporary file '.*m.bin.tmp' is the file --input names" "$bin" import --format llmc \
  "$dir/m.bin.tmp" --output "$dir/m.bin"
cp "$dir/one.h5" "$dir/two.tmp"
expect 2 "--output's temporary file: '.*two.tmp' is an HDF5 file" "$bin" export "$dir/two.tmp" --format llmc \
  --output "$dir/two"
[[ -f $dir/m.bin.tmp && $(sha256sum <"$dir/two.tmp") == "$before" ]] || fail "a refused output's temporary file went"
latest_before=$(cat "$dir/run/latest")
expect 2 "--output: '.*latest' is a checkpoint directory's \`latest\`" "$bin" export "$ck" --format safetensors \
  --output "$dir/run/latest"
expect 2 "--output: '.*run' is a checkpoint directory \(it holds \`latest\`\)" "$bin" export "$ck" --format hf \
  --output "$dir/run"
[[ $(cat "$dir/run/latest") == "$latest_before" && ! -e $dir/run/config.json ]] || fail "an export wrote into the run"
mkdir -p "$dir/hf_fifo" && mkfifo "$dir/hf_fifo/model.safetensors"
expect 2 "--output: '.*hf_fifo/model.safetensors' is a FIFO" "$bin" export "$ck" --format hf --output "$dir/hf_fifo"
mkdir -p "$dir/hf_dir/config.json"
expect 2 "--output: '.*hf_dir/config.json' is a directory" "$bin" export "$ck" --format hf --output "$dir/hf_dir"
[[ ! -e $dir/hf_dir/model.safetensors ]] || fail "a refused hf export wrote its weights"
expect 2 "--tokenizer is for --format hf" "$bin" export "$ck" --format safetensors --tokenizer "$dir/m.model" \
  --output "$dir/t.safetensors"
expect 2 "--padded-vocab-size is for --format hf only" "$bin" import --format llmc "$dir/model.bin" \
  --output "$dir/p.h5" --padded-vocab-size 256
# The model of a bytes run is not written beside an earlier export's tokenizer (it would be read with it).
mkdir -p "$dir/hf_old" && echo "an earlier export's" >"$dir/hf_old/tokenizer.model"
expect 2 "--output: '$dir/hf_old' holds tokenizer.model of an earlier export, and this checkpoint's run read bytes" \
  "$bin" export "$ck" --format hf --output "$dir/hf_old"
[[ ! -e $dir/hf_old/config.json && ! -e $dir/hf_old/model.safetensors ]] || fail "a refused hf export wrote files"
expect 0 "wrote .*hf_new \(hf\)" "$bin" export "$ck" --format hf --output "$dir/hf_new"
echo "not a checkpoint" >"$dir/old.bin"
expect 0 "wrote .*old.bin \(llmc\)" "$bin" export "$ck" --format llmc --output "$dir/old.bin"
expect 0 "saved by 1 rank\(s\) on 1 node\(s\), mesh 1x1" "$bin" inspect "$dir/one.h5" --summary
"$probe" compare "$dir/one.h5" 12 || fail "the consolidated checkpoint holds other values"
"${mpiexec[@]}" "$probe" compare "$dir/one.h5" 12 || fail "the consolidated checkpoint does not load on 4 ranks"
expect 0 "wrote .*m.safetensors \(safetensors\)" "$bin" export "$ck" --format safetensors --output "$dir/m.safetensors"
expect 0 "wrote .*n.safetensors" "$bin" export "$ck" --format safetensors --output "$dir/n.safetensors" --no-lm-head
[[ $(stat -c %s "$dir/m.safetensors") -gt $(stat -c %s "$dir/n.safetensors") ]] || fail "--no-lm-head changed nothing"

# Damage: verify names the file and the dataset, exit 2, one line.
cp "$ck" "$dir/damaged.h5"
offset=$("$bin" inspect "$dir/damaged.h5" | grep -m1 ' transformer.wpe.weight ' | sed 's/.*at byte //')
if [[ $offset =~ ^[0-9]+$ ]]; then
  pos=$((offset + 41))
  old=$(od -An -tu1 -j "$pos" -N1 "$dir/damaged.h5" | tr -d ' ')
  printf "\\x$(printf %02x $((old ^ 1)))" | dd of="$dir/damaged.h5" bs=1 seek="$pos" conv=notrunc status=none
  expect 2 "damaged.h5': dataset /model/transformer.wpe.weight fails its checksum" "$bin" verify "$dir/damaged.h5"
  expect 2 "fails its checksum" "$bin" export "$dir/damaged.h5" --format llmc --output "$dir/never.bin"
  [[ ! -e $dir/never.bin ]] || fail "export of a damaged checkpoint wrote a file"
else
  fail "inspect shows no byte offset for transformer.wpe.weight: '$offset'"
fi
truncate -s 20000 "$dir/damaged.h5"
expect 2 "damaged.h5' is truncated: 20000 of its [0-9]+ bytes" "$bin" verify "$dir/damaged.h5"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all hsdp-ckpt checks passed"
