#!/usr/bin/env bash
# hsdp-selfcheck in its CPU-only form (issue 23, item 4):
#
#   selfcheck_test.sh CASE SELFCHECK BIN_DIR WORK MPIRUN...
#
# pass:       every row passes on 4 CPU ranks as 2 nodes x 2 (10 steps); the table and the JSON lines say so.
# llama:      the same with input/llama_tiny.ini (model.arch=llama: untied head, grouped-query attention).
# detects:    a hsdp-train that trains the multi-rank rows with another learning rate (a wrapper adds
#             --train.lr=3.3e-3 when OMPI_COMM_WORLD_SIZE > 1) must fail the loss check of every row with exit 1;
#             a hsdp-plan that plans bf16 parameters (half the gather bytes) must fail the bytes check.
# one_rank:   --ranks 1 (a GPU node's first row): rows on one rank pass with --set device.streams=check; a --set
#             key reaches the rows and not the reference (--set train.lr=3.3e-3 fails the loss check). Its --mpirun
#             lacks --allow-run-as-root: as root, hsdp-selfcheck adds it itself.
# bad_input:  an odd --steps, a --set without KEY=VALUE, a --work folder of other files (kept as it was), each exits
#             2 naming it, before running anything; a --work folder an earlier hsdp-selfcheck made is replaced.
set -euo pipefail
case=$1 selfcheck=$2 bin=$3 work=$4
shift 4
mpirun="$*"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
run() { # EXPECTED_EXIT LOG ARGS...: runs hsdp-selfcheck, checks its exit code
  local expected=$1 log=$2
  shift 2
  local code=0
  "$selfcheck" --mpirun "$mpirun" --device cpu "$@" >"$log" 2>&1 || code=$?
  cat "$log"
  [[ $code == "$expected" ]] || fail "hsdp-selfcheck exited $code, expected $expected"
}

case $case in
  pass | llama)
    # 10 steps a row (resume at 5), not hsdp-selfcheck's default 20: the same checks per row, less CI time.
    deck=(--steps 10)
    [[ $case == llama ]] && deck+=(--config "$(dirname "$0")/../../input/llama_tiny.ini")
    run 0 "$work/out.txt" --work "$work/run" --json "$work/rows.jsonl" "${deck[@]}"
    grep -q "^9 of 9 rows passed" "$work/out.txt" || fail "not 9 of 9 rows passed"
    python3 - "$work/rows.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 9, len(rows)
for r in rows:
    assert r["passed"] and r["resume_bit_exact"] and r["loss_gap"] <= r["tolerance"], r
    assert r["state_bytes"] == r["plan_state_bytes"] > 0, r
    assert r["bytes"]["bytes_intra"] > 0 and r["bytes"]["bytes_inter"] > 0, r
print("9 rows: loss within tolerance, bytes and state equal hsdp-plan, resume bit-exact")
PY
    ;;
  detects)
    fake=$work/fake
    mkdir -p "$fake"
    for tool in hsdp-plan hsdp-data hsdp-ckpt; do ln -s "$bin/$tool" "$fake/$tool"; done
    cat >"$fake/hsdp-train" <<WRAP
#!/usr/bin/env bash
if [[ \${OMPI_COMM_WORLD_SIZE:-1} -gt 1 ]]; then exec "$bin/hsdp-train" "\$@" --train.lr=3.3e-3; fi
exec "$bin/hsdp-train" "\$@"
WRAP
    chmod +x "$fake/hsdp-train"
    run 1 "$work/lr.txt" --work "$work/lr" --train "$fake/hsdp-train" --rows full_shard,hybrid_shard --steps 6
    [[ $(grep -c "loss gap .* > tolerance" "$work/lr.txt") == 2 ]] || fail "the loss check did not fail on both rows"
    grep -q "^0 of 2 rows passed; failed: full_shard, hybrid_shard" "$work/lr.txt" || fail "summary line"
    rm "$fake/hsdp-train" "$fake/hsdp-plan"
    ln -s "$bin/hsdp-train" "$fake/hsdp-train"
    cat >"$fake/hsdp-plan" <<WRAP
#!/usr/bin/env bash
exec "$bin/hsdp-plan" "\$@" --param-dtype bf16
WRAP
    chmod +x "$fake/hsdp-plan"
    run 1 "$work/plan.txt" --work "$work/plan" --plan "$fake/hsdp-plan" --rows full_shard --steps 4
    grep -q "bytes_intra .* != plan" "$work/plan.txt" || fail "the bytes check did not fail"
    ;;
  one_rank)
    mpirun=${mpirun//--allow-run-as-root/}
    run 0 "$work/check.txt" --work "$work/check" --ranks 1 --ranks-per-node 1 --rows full_shard,zero1 --steps 4 \
      --set device.streams=check
    grep -q "^2 of 2 rows passed" "$work/check.txt" || fail "not 2 of 2 rows passed"
    grep -q "on 1 cpu rank(s) .*rows also get device.streams=check" "$work/check.txt" || fail "header"
    run 1 "$work/lr.txt" --work "$work/lr" --ranks 1 --ranks-per-node 1 --rows full_shard --steps 4 \
      --set train.lr=3.3e-3
    grep -q "loss gap .* > tolerance" "$work/lr.txt" || fail "--set train.lr did not reach the row"
    ;;
  bad_input)
    run 2 "$work/out.txt" --work "$work/run" --steps 5
    grep -q "hsdp-selfcheck: error: --steps 5: need an even number" "$work/out.txt" || fail "message"
    run 2 "$work/set.txt" --work "$work/run" --set comm.intra
    grep -q "hsdp-selfcheck: error: --set comm.intra: need KEY=VALUE" "$work/set.txt" || fail "--set message"
    # A deck key or value hsdp-train refuses (through --set or in the deck), a --work or --json it cannot write: exit
    # 2 before any run, naming it (not a traceback, not a row that fails).
    run 2 "$work/key.txt" --work "$work/run" --set comm.timeout_s=abc
    grep -q "hsdp-selfcheck: error: .*--set comm.timeout_s=abc: hsdp-train refuses it: .*comm.timeout_s: 'abc' is not" \
      "$work/key.txt" || fail "--set with a bad value: $(cat "$work/key.txt")"
    printf '[train]\nsteps = abc\n' >"$work/bad.ini"
    run 2 "$work/deck.txt" --work "$work/run" --config "$work/bad.ini"
    grep -q "hsdp-selfcheck: error: --config $work/bad.ini: hsdp-train refuses it: .*train.steps" "$work/deck.txt" ||
      fail "a bad deck: $(cat "$work/deck.txt")"
    run 2 "$work/json.txt" --work "$work/run" --json "$work/no/such/folder/rows.json"
    grep -q "hsdp-selfcheck: error: --json $work/no/such/folder/rows.json: cannot be written" "$work/json.txt" ||
      fail "--json: $(cat "$work/json.txt")"
    [[ ! -e $work/run ]] || fail "ran something"
    touch "$work/file"
    run 2 "$work/work.txt" --work "$work/file/run"
    grep -q "hsdp-selfcheck: error: --work $work/file/run: cannot make the folder" "$work/work.txt" ||
      fail "--work under a file: $(cat "$work/work.txt")"
    # --work: a folder of someone else's files is refused and kept; one an earlier hsdp-selfcheck made is replaced.
    mkdir -p "$work/theirs/checkpoints" && echo keep >"$work/theirs/checkpoints/step_100.h5"
    run 2 "$work/theirs.txt" --work "$work/theirs" --ranks 1 --ranks-per-node 1 --rows no_shard --steps 4
    grep -q "hsdp-selfcheck: error: --work $work/theirs: a folder that holds files and was not made by hsdp-selfcheck" \
      "$work/theirs.txt" || fail "--work message"
    [[ $(cat "$work/theirs/checkpoints/step_100.h5") == keep ]] || fail "a refused --work folder was changed"
    run 0 "$work/own.txt" --work "$work/own" --ranks 1 --ranks-per-node 1 --rows no_shard --steps 4
    [[ $(cat "$work/own/.hsdp-own-dir") == hsdp-selfcheck ]] || fail "its --work folder not marked"
    # As a folder of an hsdp-selfcheck from before the mark, with a file left in it: recognised and replaced.
    rm "$work/own/.hsdp-own-dir" && touch "$work/own/left_from_before"
    run 0 "$work/own.txt" --work "$work/own" --ranks 1 --ranks-per-node 1 --rows no_shard --steps 4
    [[ $(cat "$work/own/.hsdp-own-dir") == hsdp-selfcheck && ! -e $work/own/left_from_before ]] ||
      fail "its own --work folder not replaced"
    ;;
  *) fail "unknown case $case" ;;
esac
echo "PASS: $case"
