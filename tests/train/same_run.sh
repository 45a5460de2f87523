#!/usr/bin/env bash
# Ranks launched with different decks refuse to train together (issue 36): an MPMD launch whose halves differ in
# train.lr (which trained to the end, each half with its own learning rate) and in model.n_layer (which hung at the
# first collective until comm.timeout_s) both end at start-up with exit 2 and one line naming the ranks and hosts
# that differ from rank 0; the same launch with equal decks trains.
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
mpmd "$run/same" -- >/dev/null 2>&1 || fail "equal decks did not train"
[[ $(wc -l <"$run/same/metrics.jsonl") == 2 ]] || fail "equal decks: not 2 steps"
echo "PASS: equal decks train; different ones are refused at start-up"
