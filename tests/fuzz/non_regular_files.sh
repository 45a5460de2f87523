#!/usr/bin/env bash
# Tools given a path that is not a regular file end at once with exit 2 and one line naming it, instead of blocking
# forever (a FIFO as input) or replacing it (a device node or a FIFO as output, written through a temporary file
# and a rename):
#   inputs:  hsdp-data encode/info, hsdp-ckpt inspect/verify/import --format llmc, hsdp-train's data.entropy_json
#            on a FIFO
#   outputs: hsdp-data encode, hsdp-ckpt export --format safetensors|llmc, consolidate, import onto a FIFO and onto
#            a character device made here like /dev/full (mknod 1 7; skipped where mknod is not permitted)
#   non_regular_files.sh BIN_DIR FIXTURES WORK
set -uo pipefail
bin=$1
fixtures=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
good=$fixtures/good/step_2.h5
[[ -f $good ]] || { echo "FAIL: no fixture checkpoint $good"; exit 1; }
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

mkfifo "$work/fifo"
printf 'some text to encode, long enough to split\n%.0s' {1..20} >"$work/text.txt"
devices=("$work/fifo")
if mknod "$work/full" c 1 7 2>/dev/null; then
  devices+=("$work/full")
else
  echo "note: mknod is not permitted here; the device-node outputs are not tried"
fi

# expect NAME WHAT_IN_MESSAGE COMMAND...: exit 2 within 30 s, the path and what it is on stderr.
expect() {
  local name=$1 text=$2
  shift 2
  local started=$SECONDS status
  timeout 30 "$@" >"$work/out" 2>"$work/err"
  status=$?
  local took=$((SECONDS - started))
  if ((status == 124)); then
    fail "$name: still blocked after 30 s"
  elif ((status != 2)); then
    fail "$name: exit $status, not 2: $(head -c 400 "$work/err")"
  elif ! grep -qF -- "$text" "$work/err"; then
    fail "$name: stderr does not say '$text': $(head -c 400 "$work/err")"
  else
    echo "ok: $name: exit 2 in ${took} s: $(head -n 1 "$work/err")"
  fi
}

fifo=$work/fifo
expect "hsdp-data encode --input FIFO" "'$fifo' is a FIFO" "$bin/hsdp-data" encode --input "$fifo" --output "$work/t.bin"
expect "hsdp-data info --input FIFO" "is not a regular file" "$bin/hsdp-data" info --input "$fifo"
expect "hsdp-ckpt inspect FIFO" "'$fifo' is a FIFO" "$bin/hsdp-ckpt" inspect "$fifo"
expect "hsdp-ckpt verify FIFO" "'$fifo' is a FIFO" "$bin/hsdp-ckpt" verify "$fifo"
expect "hsdp-ckpt import --format llmc FIFO" "'$fifo' is a FIFO" "$bin/hsdp-ckpt" import --format llmc "$fifo" \
  --output "$work/imported.h5"
# hsdp-train's optional entropy file (issue 36: it blocked start-up until comm.startup_timeout_s).
expect "hsdp-train --data.entropy_json=FIFO" "'$fifo' is a FIFO" "$bin/hsdp-train" \
  --config "$(dirname "$0")/../../input/quickstart.ini" --data.train="$fixtures/data/train.bin" \
  --data.val="$fixtures/data/val.bin" --data.entropy_json="$fifo" --train.steps=1 --train.eval_every=0 --checkpoint.dir= \
  --log.dir="$work/log"

for target in "${devices[@]}"; do
  kind="a FIFO"
  test_kind=-p
  [[ -c $target ]] && kind="a character device" && test_kind=-c
  expect "hsdp-data encode --output $kind" "'$target' is $kind" "$bin/hsdp-data" encode --input "$work/text.txt" \
    --output "$target"
  for format in safetensors llmc; do
    expect "hsdp-ckpt export --format $format --output $kind" "'$target' is $kind" "$bin/hsdp-ckpt" export "$good" \
      --format "$format" --output "$target"
  done
  expect "hsdp-ckpt consolidate --output $kind" "'$target' is $kind" "$bin/hsdp-ckpt" consolidate "$good" \
    --output "$target"
  test "$test_kind" "$target" || fail "$target is no longer $kind"
  ls "$work" | grep -q '\.tmp$' && fail "a .tmp file was left: $(ls "$work")"
done
[[ -p $fifo ]] || fail "$fifo is no longer a FIFO"

rm -rf "$work"
if ((fails > 0)); then
  echo "$fails check(s) failed"
  exit 1
fi
echo "PASS: non-regular inputs and outputs refused with exit 2"
