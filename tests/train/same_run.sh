#!/usr/bin/env bash
# Ranks launched with different decks refuse to train together (issue 36): an MPMD launch whose halves differ in
# train.lr (which trained to the end, each half with its own learning rate) and in model.n_layer (which hung at the
# first collective until comm.timeout_s) both end at start-up with exit 2 and one line naming the ranks and hosts
# that differ from rank 0; the same launch with equal decks trains. Ranks whose data files differ at the same path
# (relative paths, each half launched in its own directory: a copy that differs between nodes) end at start-up with
# exit 2 naming the file, the ranks and hosts.
set -euo pipefail
train=$1 deck=$2 data=$3 run=$4 mpiexec=$5
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$run"
mkdir -p "$run"
common=(--config "$deck" --data.train="$data/train.bin" --data.val="$data/val.bin" --data.entropy_json= --train.steps=2
        --train.eval_every=0 --checkpoint.dir= --device.threads=1)
mpmd() {  # LOG_DIR ARGS_A -- ARGS_B: 2 ranks with A's extra keys, 2 with B's
  local log=$1 a=() b=() side=a
  shift
  for x in "$@"; do
    if [[ $x == -- ]]; then side=b; continue; fi
    if [[ $side == a ]]; then a+=("$x"); else b+=("$x"); fi
  done
  timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$train" "${common[@]}" --log.dir="$log" "${a[@]}" \
    : -np 2 "$train" "${common[@]}" --log.dir="$log" "${b[@]}"
}
fail() { echo "FAIL: $*" >&2; exit 1; }
for differ in "--train.lr=1e-3 -- --train.lr=2e-3" "--model.n_layer=4 -- --model.n_layer=2"; do
  set +e
  # shellcheck disable=SC2086 # the keys, one word each
  out=$(mpmd "$run/a" $differ 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "$differ: exit $rc, not 2: $out"
  [[ $(grep -c "hsdp-train: config error" <<<"$out") == 1 ]] || fail "$differ: not one error line: $out"
  grep -q "rank(s) 2 (.*), 3 (.*) were given another deck than rank 0" <<<"$out" || fail "$differ: ranks not named: $out"
  [[ -e $run/a/metrics.jsonl ]] && fail "$differ: a step was trained"
  echo "refused: $differ: $(grep "hsdp-train: config error" <<<"$out" | cut -c1-160)"
done
# The same deck, relative data paths, each half in its own directory holding other tokens under the same name.
mkdir -p "$run/node_a" "$run/node_b"
cp "$data/train.bin" "$data/val.bin" "$run/node_a/"
for differ in train val; do
  cp "$data/train.bin" "$data/val.bin" "$run/node_b/"
  other=$([[ $differ == train ]] && echo val || echo train)
  cp "$data/$other.bin" "$run/node_b/$differ.bin"
  eval_every=$([[ $differ == val ]] && echo 1 || echo 0)  # data.val is read where something evaluates
  set +e
  out=$(cd "$run" && timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root \
    -np 2 -wdir "$run/node_a" "$train" "${common[@]}" --data.train=train.bin --data.val=val.bin --log.dir="$run/data" \
    --train.eval_every="$eval_every" : -np 2 -wdir "$run/node_b" "$train" "${common[@]}" --data.train=train.bin --data.val=val.bin --log.dir="$run/data" \
    --train.eval_every="$eval_every" 2>&1)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "data.$differ differs: exit $rc, not 2: $out"
  [[ $(grep -c "hsdp-train: data error" <<<"$out") == 1 ]] || fail "data.$differ differs: not one error line: $out"
  grep -q "data.$differ '$differ.bin' is not the same file on every rank: rank(s) 2 (.*), 3 (.*) read other tokens" \
    <<<"$out" || fail "data.$differ differs: file or ranks not named: $out"
  [[ -e $run/data/metrics.jsonl ]] && fail "data.$differ differs: a step was trained"
  echo "refused: data.$differ differs on ranks 2, 3: $(grep "hsdp-train: data error" <<<"$out" | cut -c1-120)"
done
mpmd "$run/same" -- >/dev/null 2>&1 || fail "equal decks did not train"
[[ $(wc -l <"$run/same/metrics.jsonl") == 2 ]] || fail "equal decks: not 2 steps"
echo "PASS: equal decks train; different decks and different data files are refused at start-up"
