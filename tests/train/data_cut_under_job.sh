#!/usr/bin/env bash
# A token file cut shorter in place while hsdp-train reads it (as `cp other.bin train.bin` does: it truncates the
# file, then writes): the job ends with exit 2 and one line naming the file, not with every rank dead of SIGBUS.
# A file replaced by a rename goes on being read from the old inode (nothing to test: the mapping stays valid).
#   data_cut_under_job.sh HSDP_TRAIN DECK DATA WORK
set -uo pipefail
train=$1 deck=$2 data=$3 work=$4
rm -rf "$work" && mkdir -p "$work"
cp "$data/train.bin" "$work/train.bin"
fail() {
  echo "FAIL: $*"
  exit 1
}
"$train" --config "$deck" --data.train="$work/train.bin" --data.val="$data/val.bin" --data.entropy_json= \
  --train.steps=1000000 --train.eval_every=0 --log.every=1 --log.dir="$work/log" --checkpoint.dir= \
  --device.threads=1 >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 300); do
  [[ -f $work/log/metrics.jsonl && $(wc -l <"$work/log/metrics.jsonl") -ge 5 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$pid" 2>/dev/null || { cat "$work/err"; fail "hsdp-train ended before the file was cut"; }
steps=$(wc -l <"$work/log/metrics.jsonl")
truncate -s 4096 "$work/train.bin"  # in place: the header and 1,024 tokens remain
started=$SECONDS
for _ in $(seq 600); do
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then
  kill -9 "$pid"
  fail "hsdp-train still running 60 s after its data file was cut"
fi
wait "$pid"
code=$?
((code == 2)) || { cat "$work/err"; fail "exit $code after the data file was cut, expected 2"; }
grep -q "data.train: '$work/train.bin' was cut shorter while this job was reading it" "$work/err" ||
  { cat "$work/err"; fail "no line naming the file"; }
echo "PASS: cut after $steps steps: exit 2 in $((SECONDS - started)) s: $(grep -m1 "cut shorter" "$work/err" | cut -c1-160)..."
rm -rf "$work"
