#!/usr/bin/env bash
# End-to-end checks of hsdp-data: every command's --help, a small synth and encode, and that bad options
# and bad data exit 2 with one line naming the problem.
set -uo pipefail
bin=$1
dir=$(mktemp -d)
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
expect 0 '--out-dir.*--vocab|--vocab' "$bin" synth --help
expect 0 '--uniform-mix' "$bin" synth --help
expect 0 '--val-fraction' "$bin" encode --help
expect 0 '--input' "$bin" info --help
expect 2 'missing command' "$bin"
expect 2 "unknown command 'frobnicate'" "$bin" frobnicate
expect 2 "unrecognised option '--bogus'" "$bin" synth --bogus
expect 2 "'--out-dir' is required" "$bin" synth
expect 2 'too many positional options' "$bin" synth --out-dir "$dir/s" stray
expect 2 "'--vocab' is invalid" "$bin" synth --out-dir "$dir/s" --vocab many
expect 2 '--vocab\^--order' "$bin" synth --out-dir "$dir/s" --vocab 4096 --order 2
expect 2 '--train-tokens must be > 0' "$bin" synth --out-dir "$dir/s" --train-tokens -5

# A text above 2^31 - 1 bytes (sparse: it takes no space) is refused before it is read (issue 36: it was read whole,
# 9 GiB of memory with its tokens, or std::bad_alloc where memory is short).
if truncate -s 3G "$dir/huge.txt" 2>/dev/null; then
  expect 2 "has 3221225472 bytes, more than the 2147483647 tokens a token file holds" \
    "$bin" encode --input "$dir/huge.txt" --output "$dir/huge.bin"
  [[ -e $dir/huge.bin ]] && fail "encode of the 3 GiB text wrote $dir/huge.bin"
  rm -f "$dir/huge.txt"
fi
expect 0 'entropy rate' "$bin" synth --out-dir "$dir/s" --vocab 32 --order 2 --train-tokens 20000 --val-tokens 3000
expect 0 'entropy rate' "$bin" synth --out-dir "$dir/s" --vocab 32 --order 2 --train-tokens 20000 --val-tokens 3000
[[ -f $dir/s/train.bin && -f $dir/s/val.bin ]] || fail "synth did not write train.bin and val.bin"
grep -q '"entropy_nats_per_token":' "$dir/s/source.json" || fail "source.json lacks the entropy"
expect 0 '20000 tokens, largest id 31, all < vocab 32' "$bin" info --input "$dir/s/train.bin" --vocab 32
expect 2 'token [0-9]+ at position [0-9]+ is >= vocab size 16' "$bin" info --input "$dir/s/train.bin" --vocab 16

printf 'hello hsdp\n' >"$dir/in.txt"
expect 0 'wrote .*out.bin: 10 tokens' "$bin" encode --input "$dir/in.txt" --output "$dir/out.bin" \
  --val-output "$dir/val.bin" --val-fraction 0.1
expect 0 '10 tokens' "$bin" info --input "$dir/out.bin" --vocab 256
expect 0 'wrote .*new/dir/out.bin' "$bin" encode --input "$dir/in.txt" --output "$dir/new/dir/out.bin"
# synth replaces only its own files: token files from elsewhere are refused, unchanged.
mkdir -p "$dir/encoded" && cp "$dir/out.bin" "$dir/encoded/train.bin"
expect 2 "synth: --out-dir '.*encoded' holds train.bin that hsdp-data synth did not write" "$bin" synth \
  --out-dir "$dir/encoded"
cmp -s "$dir/out.bin" "$dir/encoded/train.bin" || fail "a refused synth changed the token file"
# An output never replaces the text it is made from, nor the other output.
text_before=$(sha256sum <"$dir/in.txt")
expect 2 "--output '.*in.txt' is the file --input names" "$bin" encode --input "$dir/in.txt" --output "$dir/./in.txt"
cp "$dir/in.txt" "$dir/enc.bin.tmp"
expect 2 "--output's temporary file '.*enc.bin.tmp' is the file --input names" "$bin" encode --input "$dir/enc.bin.tmp" \
  --output "$dir/enc.bin"
[[ -f $dir/enc.bin.tmp ]] || fail "a refused encode removed its input"
expect 2 "--val-output '.*v.bin' is the file --output names" "$bin" encode --input "$dir/in.txt" --output "$dir/v.bin" \
  --val-output "$dir/v.bin"
echo "a tokenizer model" >"$dir/m.model"
expect 2 "--output '.*m.model' is the file --tokenizer names" "$bin" encode --input "$dir/in.txt" \
  --tokenizer "$dir/m.model" --output "$dir/m.model"
[[ $(cat "$dir/m.model") == "a tokenizer model" ]] || fail "a refused encode changed its tokenizer"
[[ $(sha256sum <"$dir/in.txt") == "$text_before" ]] || fail "a refused encode changed its input"
# Nor an HDF5 file (a checkpoint), nor the tokenizer's own input; a prefix names a file, not a folder; synth's
# outputs are regular files (a FIFO source.json would block its read) and its counts fit the header, said at once.
printf '\x89HDF\r\n\x1a\n a checkpoint' >"$dir/ck.h5"
expect 2 "--output: '.*ck.h5' is an HDF5 file \(a checkpoint\?\), which hsdp-data never writes over" "$bin" encode \
  --input "$dir/in.txt" --output "$dir/ck.h5"
cp "$dir/in.txt" "$dir/t.vocab"
expect 2 "--out '.*t.vocab' is the file --input names" "$bin" tokenizer train --input "$dir/t.vocab" --out "$dir/t"
cmp -s "$dir/in.txt" "$dir/t.vocab" || fail "a refused tokenizer train changed its input"
expect 2 "--out '.*/' names a folder, not a file prefix" "$bin" tokenizer train --input "$dir/in.txt" --out "$dir/"
expect 2 "--out: cannot create the folder '.*in.txt': Not a directory" "$bin" tokenizer train --input "$dir/in.txt" \
  --out "$dir/in.txt/tok"
mkdir -p "$dir/fifo_synth" && mkfifo "$dir/fifo_synth/source.json" && : >"$dir/fifo_synth/train.bin"
expect 2 "synth: --out-dir: '.*source.json' is a FIFO" timeout 20 "$bin" synth --out-dir "$dir/fifo_synth"
expect 2 "synth: --train-tokens 3000000000 does not fit the int32 token count" timeout 20 "$bin" synth \
  --out-dir "$dir/huge_synth" --train-tokens 3000000000
[[ ! -e $dir/huge_synth ]] || fail "a refused synth made its folder"
# Options that would do nothing are refused, not ignored.
expect 2 "--seed draws the documents of --val-split documents" "$bin" encode --input "$dir/in.txt" \
  --output "$dir/x.bin" --seed 3
# --val-split documents keeps each paragraph's blank lines: the two files hold every byte of the text between them.
printf 'para one\nline two\n\npara two\n\n\npara three\n\npara four\nend\n' >"$dir/paras.txt"
expect 0 'documents: 4, 1 held out' "$bin" encode --input "$dir/paras.txt" --output "$dir/paras.bin" \
  --val-output "$dir/paras_val.bin" --val-split documents --val-fraction 0.25 --seed 2
held=$(( ($(stat -c %s "$dir/paras.bin") + $(stat -c %s "$dir/paras_val.bin") - 2048) / 2 ))
[[ $held == $(stat -c %s "$dir/paras.txt") ]] || fail "the documents hold $held tokens, the text $(stat -c %s "$dir/paras.txt") bytes"
expect 2 "--vocab must be >= 1, got 0" "$bin" info --input "$dir/out.bin" --vocab 0
expect 2 "--seed must be >= 0, got -5" "$bin" synth --out-dir "$dir/neg_seed" --seed -5  # not 2^64 - 5
expect 0 '1 tokens' "$bin" info --input "$dir/val.bin"
expect 2 '--val-fraction needs --val-output' "$bin" encode --input "$dir/in.txt" --output "$dir/x.bin" \
  --val-fraction 0.2
expect 2 "cannot open '.*absent.txt'" "$bin" encode --input "$dir/absent.txt" --output "$dir/x.bin"
head -c 100 "$dir/s/train.bin" >"$dir/cut.bin"
expect 2 'cut.bin.*smaller than the 1024-byte header' "$bin" info --input "$dir/cut.bin"

if ((failures > 0)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all hsdp-data CLI checks passed"
