#!/usr/bin/env bash
# device_check.sh's GPU-only sections, without a GPU: `run` with `all` and with `speed`, as a lent GPU machine runs
# them, on a fake GPU layer. A lent GPU comes rarely and for minutes, so a slip in the bash of those sections (an
# unset variable under set -u, a file written under one name and read under another, a section that never reaches its
# summary) must be found here, not there. The script is the one of the repository; around it stand a fake repository
# (that script, the real tests/train/trace.sh, tools/bench/trace_gaps.py and input/*.ini; a fake hsdp-selfcheck and
# tools/bench/pytorch_gpt2.py), a fake pack (fake gpu_probe, GPU gtests, benches and hsdp-train; the real hsdp-data,
# hsdp-ckpt and hsdp-plan of BUILD; a fake Open MPI launcher that starts one process per rank) and a fake nvidia-smi
# and torch. Checked: both runs exit 0, `all` ends with "status 0" and says nothing of an unbound variable, a missing
# file or command, a time limit or a failure; every section's files are there with the lines they should hold; the
# speed table is printed; a fused GEMM that cuBLASLt declined is named ("declined: "); where torch.compile fails the
# eager PyTorch model runs; a TERM while a section hangs (the outer limit's) is said at once on the run's output and
# stops that section's command. The fakes record how they were called, and the real programs must accept the same:
# hsdp-bench-train-gpu stops with 77 (options and deck valid, no GPU), hsdp-train --check-config exits 0,
# hsdp-selfcheck gets past its input checks to its first run, pytorch_gpt2.py stops with 77 (no torch).
#
#   device_check_flow_test.sh DEVICE_CHECK REPO BUILD WORK
set -euo pipefail
device_check=$1 repo=$2 build=$3 work=$4
fail() { echo "FAIL: $*"; exit 1; }
for b in hsdp-bench-train-gpu hsdp-train hsdp-data hsdp-ckpt hsdp-plan; do
  [[ -x $build/bin/$b ]] || fail "$build/bin/$b is missing (a build with CUDA?)"
done
rm -rf "$work"
fake_repo=$work/repo pack=$work/pack fakes=$work/fakes calls=$work/calls
mkdir -p "$fake_repo/tests/gpu" "$fake_repo/tests/train" "$fake_repo/tools/bench" "$fake_repo/tools/selfcheck" \
  "$fake_repo/input" "$pack/bin" "$pack/lib" "$pack/root/usr/bin" "$fakes/bin" "$fakes/python/torch" "$calls"
cp "$device_check" "$fake_repo/tests/gpu/device_check.sh"
cp "$repo/tests/train/trace.sh" "$fake_repo/tests/train/"
cp "$repo/tools/bench/trace_gaps.py" "$fake_repo/tools/bench/"
cp "$repo/input/"*.ini "$fake_repo/input/"
cp "$build/bin/hsdp-data" "$build/bin/hsdp-ckpt" "$build/bin/hsdp-plan" "$pack/bin/"
echo "fake pack of device_check_flow_test.sh" >"$pack/PACKED"

# Each fake records a call as its arguments, NUL-terminated, in a file of its own: calls/<program>.XXXXXX.
cat >"$pack/bin/gpu_probe" <<'FAKE'
#!/usr/bin/env bash
# gpu_probe, faked: one GPU visible.
if [[ ${1:-} == --count ]]; then echo 1; else echo "1 CUDA device visible: NVIDIA H200"; fi
FAKE

cat >"$pack/bin/gpu_kernels_test" <<'FAKE'
#!/usr/bin/env bash
# A GPU gtest binary, faked: two tests pass; gtest's lines on stdout and its --gtest_output=json:FILE.
set -euo pipefail
json=
for a in "$@"; do
  case $a in
  --gtest_output=json:*) json=${a#--gtest_output=json:} ;;
  --gtest_filter=*) ;;
  *) echo "$0: unknown flag $a" >&2; exit 2 ;;
  esac
done
cat <<'LOG'
[==========] Running 2 tests from 1 test suite.
[ RUN      ] Fake.First
[       OK ] Fake.First (0 ms)
[ RUN      ] Fake.Second
[       OK ] Fake.Second (0 ms)
[==========] 2 tests from 1 test suite ran. (0 ms total)
[  PASSED  ] 2 tests.
LOG
[[ -z $json ]] || cat >"$json" <<'JSON'
{"tests": 2, "failures": 0, "disabled": 0, "errors": 0, "name": "AllTests", "testsuites": [{"name": "Fake",
 "tests": 2, "failures": 0, "testsuite": [{"name": "First", "result": "COMPLETED"},
 {"name": "Second", "result": "COMPLETED"}]}]}
JSON
FAKE
cp "$pack/bin/gpu_kernels_test" "$pack/bin/gpu_device_ops_test"
cp "$pack/bin/gpu_kernels_test" "$pack/bin/gpu_executor_test"

cat >"$pack/bin/hsdp-bench-train-gpu" <<'FAKE'
#!/usr/bin/env bash
# hsdp-bench-train-gpu, faked (and, as hsdp-bench-train-gpu-whole, the baseline's): the real one's table, then its
# JSON line; with model.gemm_epilogue=fused the warning hsdp-train's engine gives on stderr for a fused GEMM that
# cuBLASLt declined.
set -euo pipefail
name=$(basename "$0")
printf '%s\0' "$@" >"$(mktemp "${HSDP_FAKE_CALLS:?}/$name.XXXXXX")"
path=engine batch=8 n_layer=12 n_embd=768 n_head=12 sharding=no_shard attention=unfused epilogue=separate kernels=
args=("$@")
for ((i = 0; i < $#; i++)); do
  value=${args[i + 1]:-}
  case ${args[i]} in
  --path) path=$value ;;
  --batch) batch=$value ;;
  --n_layer) n_layer=$value ;;
  --n_embd) n_embd=$value ;;
  --n_head) n_head=$value ;;
  --sharding) sharding=$value ;;
  --set)
    case $value in
    model.attention=*) attention=${value#*=} ;;
    model.gemm_epilogue=*) epilogue=${value#*=} ;;
    esac
    ;;
  --kernel_breakdown) kernels=',"kernels_ms":{"matmul":20.5,"attention":6.25,"elementwise":2.5},"kernel_step_ms":31' ;;
  esac
done
if [[ $epilogue == fused ]]; then
  echo "[rank 0] warning: model.gemm_epilogue=fused: cuBLASLt has no fused kernel for D[8192x3072] = op(A) op(B)" \
    "with K=768, GELU-gradient epilogue on this GPU; that GEMM runs with the separate kernels" >&2
fi
step_ms=$((n_layer * batch / 4)) tokens=$((batch * 1024))
echo "$name (fake): GPT L=$n_layer C=$n_embd H=$n_head, B=$batch T=1024, 1 rank(s) of NVIDIA H200, $sharding"
printf '%-6s %10s %12s\n' step ms tokens/s
for step in 1 2 3; do printf '%-6d %10d %12d\n' "$step" "$step_ms" $((tokens * 1000 / step_ms)); done
echo "mean $step_ms ms/step, $((tokens * 1000 / step_ms)) tokens/s per rank"
printf '{"bench":"train_gpu","path":"%s","sharding":"%s","n_layer":%d,"batch":%d,"attention":"%s",%s}\n' \
  "$path" "$sharding" "$n_layer" "$batch" "$attention" \
  "\"gemm_epilogue\":\"$epilogue\",\"step_ms\":$step_ms,\"tokens_per_s\":$((tokens * 1000 / step_ms)),\"mfu\":0.4$kernels"
FAKE
cp "$pack/bin/hsdp-bench-train-gpu" "$pack/bin/hsdp-bench-train-gpu-whole"

cat >"$pack/bin/hsdp-train" <<'FAKE'
#!/usr/bin/env python3
"""hsdp-train, faked: the deck and its --section.key=value overrides read as the real one reads them (the last of a
key wins). A model whose state (16 bytes a parameter) exceeds the fake GPU's memory is refused with the real
message's words, exit 2. Else rank 0 writes log.dir/metrics.jsonl (a line a step: the loss a function of the step,
bf16 parameters moving it by 1e-3), summary.json and, with checkpoint.dir, step_<N>.h5 and `latest` naming it at the
last step (checkpoint.resume=auto resumes from it); with log.trace=true every rank writes trace_rank<R>.json as
tests/train/trace.sh and tools/bench/trace_gaps.py read it. The rank is Open MPI's OMPI_COMM_WORLD_RANK."""
import configparser
import json
import os
import socket
import sys
import tempfile

GPU_BYTES = 140 * 2**30  # the fake nvidia-smi's H200

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
if rank == 0:
    fd, _ = tempfile.mkstemp(prefix="hsdp-train.", dir=os.environ["HSDP_FAKE_CALLS"])
    os.write(fd, b"".join(a.encode() + b"\0" for a in sys.argv[1:]))
    os.close(fd)


def bad_input(message):
    print(f"[rank {rank}@{socket.gethostname()}] error: hsdp-train: config error: {message}", file=sys.stderr)
    sys.exit(2)


keys, args = {}, iter(sys.argv[1:])
for a in args:
    if a in ("--config", "-c"):
        deck = configparser.ConfigParser()
        deck.read(next(args))
        keys.update({f"{section}.{k}": v for section in deck.sections() for k, v in deck[section].items()})
    elif a.startswith("--") and "." in a.split("=")[0] and "=" in a:
        key, value = a[2:].split("=", 1)
        keys[key] = value
    else:
        bad_input(f"unexpected argument '{a}'")
n_layer, n_embd = int(keys.get("model.n_layer", 12)), int(keys.get("model.n_embd", 768))
params = 12 * n_layer * n_embd**2
if keys.get("device.type") == "cuda" and 16 * params > GPU_BYTES:
    bad_input(f"memory: this rank needs at least {16 * params / 2**30:.3g} GiB (model state) but has "
              f"{GPU_BYTES / 2**30:.3g} GiB (free memory (cudaMemGetInfo) of GPU 0 (NVIDIA H200) of host "
              f"{socket.gethostname()} / 1 rank(s) on it): `hsdp-plan --config <deck>` shows what fits")

log_dir, ckpt = keys["log.dir"], keys.get("checkpoint.dir", "")
steps = int(keys["train.steps"])
stop = int(keys.get("train.stop_at_step", 0)) or steps
start = 0
if ckpt and keys.get("checkpoint.resume", "auto") == "auto" and os.path.exists(f"{ckpt}/latest"):
    start = int(open(f"{ckpt}/latest").read().strip()[len("step_"):-len(".h5")])
os.makedirs(log_dir, exist_ok=True)
scale = 1.001 if keys.get("precision.param") == "bf16" else 1.0
if rank == 0:
    with open(f"{log_dir}/metrics.jsonl", "a") as f:
        for step in range(start + 1, stop + 1):
            loss = (0.5 + 4.0 * 0.9**step) * scale
            print(f"step {step}/{steps} | loss {loss:.4f} | 100000 tokens/s | 30.0 ms")
            f.write(json.dumps({"step": step, "loss": loss, "lr": 3e-3, "grad_norm": 1.0, "tokens_per_s": 1e5,
                                "step_ms": 30.0, "exposed_comm_ms": 0.2,
                                "memory": {"params": 4 * params, "grads": 4 * params, "optimizer": 8 * params}}) + "\n")
    json.dump({"steps": stop, "loss": loss, "tokens_per_s": 1e5}, open(f"{log_dir}/summary.json", "w"))
    if ckpt:
        os.makedirs(ckpt, exist_ok=True)
        open(f"{ckpt}/step_{stop}.h5", "w").write("fake checkpoint\n")
        open(f"{ckpt}/latest", "w").write(f"step_{stop}.h5\n")
if keys.get("log.trace") == "true":
    tracks = ["compute", "gather", "reduce", "cross", "host"]
    events = [{"ph": "M", "name": "thread_name", "pid": rank, "tid": t, "args": {"name": n}}
              for t, n in enumerate(tracks)]
    span = lambda track, name, ts, dur: events.append(
        {"ph": "X", "name": name, "pid": rank, "tid": tracks.index(track), "ts": ts, "dur": dur})
    ts = 0
    for step in range(start + 1, stop + 1):
        events.append({"ph": "i", "name": f"begin_step {step}", "pid": rank, "tid": 4, "ts": ts, "s": "t"})
        for phase, blocks in (("forward", range(1, n_layer + 1)), ("backward", range(n_layer, 0, -1))):
            for b in blocks:  # 10 us idle after each: the gaps trace_gaps.py lists
                span("compute", f"{phase} block unit {b}", ts, 40)
                ts += 50
        for unit in range(n_layer + 2):
            span("reduce", f"qgZ all_to_all unit {unit}", ts, 20)
            span("cross", f"all_reduce gradient shard unit {unit}", ts + 20, 20)
        span("host", "wait for reduce", ts, 300)  # 0.3 ms: at least the step's exposed_comm_ms
        ts += 400
    json.dump(events, open(f"{log_dir}/trace_rank{rank}.json", "w"))
FAKE

# Open MPI's launcher, faked where device_check.sh puts the packed one: the options the script and trace.sh give, then
# the command once per rank, all at once, with OMPI_COMM_WORLD_RANK and _SIZE as Open MPI sets them; its status is the
# first failed rank's.
cat >"$pack/root/usr/bin/mpirun" <<'FAKE'
#!/usr/bin/env bash
set -uo pipefail
ranks=1
while [[ ${1:-} == -* ]]; do
  case $1 in
  --oversubscribe | --allow-run-as-root) shift ;;
  -np | -n) ranks=$2; shift 2 ;;
  *) echo "mpirun (fake): unknown option $1" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "mpirun (fake): no command" >&2; exit 2; }
pids=()
for ((r = 0; r < ranks; r++)); do
  OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$ranks "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" && continue
  code=$?
  ((status != 0)) || status=$code
done
exit "$status"
FAKE

cat >"$fake_repo/tools/selfcheck/hsdp-selfcheck" <<'FAKE'
#!/usr/bin/env python3
"""hsdp-selfcheck, faked: the programs, launcher and deck it is given must exist, as the real one requires; one
passing row per --rows name (else two) into --json, a table on stdout. Each row's log under --work carries
hsdp-train's warning for a fused GEMM that cuBLASLt declined where --set model.gemm_epilogue=fused."""
import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile

fd, _ = tempfile.mkstemp(prefix="hsdp-selfcheck.", dir=os.environ["HSDP_FAKE_CALLS"])
os.write(fd, b"".join(a.encode() + b"\0" for a in sys.argv[1:]))
os.close(fd)
p = argparse.ArgumentParser(prog="hsdp-selfcheck (fake)")
for option in ("--device", "--rows", "--work", "--json", "--mpirun", "--config", "--train", "--plan", "--data",
               "--ckpt"):
    p.add_argument(option)
p.add_argument("--set", action="append", default=[])
a, _ = p.parse_known_args()
for program in (a.train, a.plan, a.data, a.ckpt):
    if not (program and os.access(program, os.X_OK)):
        sys.exit(f"hsdp-selfcheck (fake): no program {program}")
if not shutil.which(shlex.split(a.mpirun)[0]) or (a.config and not os.path.isfile(a.config)):
    sys.exit(f"hsdp-selfcheck (fake): no launcher {a.mpirun} or no deck {a.config}")
rows = [n.strip() for n in a.rows.split(",")] if a.rows else ["no_shard", "full_shard"]
with open(a.json, "w") as f:
    for row in rows:
        log = os.path.join(a.work, row.replace(" ", "_") + ".log")
        os.makedirs(a.work, exist_ok=True)
        with open(log, "w") as out:
            out.write("step 1/10 | loss 4.2\n")
            if "model.gemm_epilogue=fused" in a.set:
                out.write("warning: model.gemm_epilogue=fused: cuBLASLt has no fused kernel for D[64x512] = op(A) "
                          "op(B) with K=128, GELU epilogue on this GPU; that GEMM runs with the separate kernels\n")
        f.write(json.dumps({"row": row, "device": a.device, "loss_gap": 0.0, "tolerance": 1e-3,
                            "resume_bit_exact": True, "passed": True, "failures": []}) + "\n")
        print(f"{row:<30} {'0.0e+00 / 1.0e-03':>24} {'ok':>6} {'ok':>6} {'exact':>7}  PASS")
print(f"{len(rows)} of {len(rows)} rows passed")
FAKE

cat >"$fake_repo/tools/bench/pytorch_gpt2.py" <<'FAKE'
#!/usr/bin/env python3
"""PyTorch's GPT-2 bench, faked: the real one's JSON line, with the fake torch's version. At B = 16 torch.compile
fails (exit 1, as where Triton finds no C compiler): device_check.sh must run the eager model then."""
import json
import os
import sys
import tempfile

import torch

fd, _ = tempfile.mkstemp(prefix="pytorch_gpt2.", dir=os.environ["HSDP_FAKE_CALLS"])
os.write(fd, b"".join(a.encode() + b"\0" for a in sys.argv[1:]))
os.close(fd)
batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 8
if batch == 16 and "--no-compile" not in sys.argv:
    print("torch._inductor.exc.InductorError: no C compiler found (fake)", file=sys.stderr)
    sys.exit(1)
print(json.dumps({"bench": "pytorch_gpt2", "batch": batch, "seq_len": 1024, "n_layer": 12, "ms_per_step": 80.0,
                  "tokens_per_s": batch * 1024 / 0.08, "mfu": 0.4, "peak_memory_bytes": 2**34,
                  "compiled": "--no-compile" not in sys.argv, "torch": torch.__version__, "device": "NVIDIA H200"}))
FAKE

cat >"$fakes/python/torch/__init__.py" <<'FAKE'
"""torch, faked: importable (device_check.sh asks `import torch` before PyTorch's bench), nothing more."""
__version__ = "0.0+fake"
FAKE

cat >"$fakes/bin/nvidia-smi" <<'FAKE'
#!/usr/bin/env bash
# nvidia-smi, faked: one H200. The queries device_check.sh makes (name, driver, memory; the used memory every -lms
# milliseconds until killed) and -L.
set -euo pipefail
query='' every=''
while (($#)); do
  case $1 in
  --query-gpu=*) query=${1#--query-gpu=} ;;
  --format=csv,noheader | --format=csv,noheader,nounits) ;;
  -lms) every=$2; shift ;;
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-0000-0000-000000000000)"; exit 0 ;;
  *) echo "nvidia-smi (fake): unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
case $query in
name,driver_version,memory.total) echo "NVIDIA H200, 570.86.15, 143771 MiB" ;;
memory.used)
  echo 2048
  while [[ -n $every ]]; do
    sleep "$((every / 1000)).$(printf '%03d' $((every % 1000)))"
    echo 2048
  done
  ;;
*) echo "nvidia-smi (fake): unknown query '$query'" >&2; exit 2 ;;
esac
FAKE
chmod +x "$pack/bin/"* "$pack/root/usr/bin/mpirun" "$fake_repo/tools/selfcheck/hsdp-selfcheck" \
  "$fake_repo/tools/bench/pytorch_gpt2.py" "$fakes/bin/nvidia-smi"

# The two runs as a lent GPU machine makes them, each under a time limit.
fake_world=(PATH="$fakes/bin:$PATH" PYTHONPATH="$fakes/python" PYTHONDONTWRITEBYTECODE=1 HSDP_FAKE_CALLS="$calls")
in_fake_world() {
  env "${fake_world[@]}" "$@"
}
status=0
in_fake_world timeout -k 10 120 bash "$fake_repo/tests/gpu/device_check.sh" run "$pack" "$work/o" >"$work/all.log" 2>&1 ||
  status=$?
((status == 0)) || { cat "$work/all.log"; fail "run (all) exited $status"; }
in_fake_world timeout -k 10 60 bash "$fake_repo/tests/gpu/device_check.sh" run "$pack" "$work/s" speed \
  >"$work/speed.log" 2>&1 || status=$?
((status == 0)) || { cat "$work/speed.log"; fail "run speed exited $status"; }

# What `all` says and writes.
shown() { cat "$work/all.log"; fail "$*"; }
[[ $(tail -n 1 "$work/all.log") == "status 0 ("* ]] || shown "run (all) does not end with 'status 0'"
for said in "unbound variable" "No such file" "command not found" "syntax error" TIMEOUT FAIL Traceback; do
  grep -q "$said" "$work/all.log" && shown "run (all) says '$said'"
  grep -q "$said" "$work/speed.log" && { cat "$work/speed.log"; fail "run speed says '$said'"; }
done
for f in gpu.txt gpu_kernels_test.json gpu_device_ops_test.json gpu_executor_test.json selfcheck.jsonl \
  selfcheck_llama.jsonl selfcheck_lean.jsonl selfcheck_lean_llama.jsonl selfcheck_2x2.jsonl selfcheck_check.jsonl \
  round_trip.jsonl engine.jsonl gaps_no_shard.jsonl plan_xl.jsonl bench.jsonl train/beyond_memory.log \
  train/trace/trace_rank3.json; do
  [[ -s $work/o/$f ]] || shown "run (all) wrote no $f, or an empty one"
done
grep -q "4 ranks x 3 steps" "$work/all.log" || shown "trace.sh did not reach its end"
grep -q "^declined: cuBLASLt has no fused kernel for D\[64x512\]" "$work/all.log" ||
  shown "no 'declined:' line for the self-checks' declined GEMM"
python3 - "$work/o" <<'PY' || shown "run (all)'s files hold other lines than expected"
import json, sys
out = sys.argv[1]
lines = lambda name: [json.loads(l) for l in open(f"{out}/{name}") if l.strip()]
for name in ("selfcheck", "selfcheck_llama", "selfcheck_lean", "selfcheck_lean_llama", "selfcheck_2x2",
             "selfcheck_check"):
    assert all(r["passed"] for r in lines(f"{name}.jsonl")), name
trips = lines("round_trip.jsonl")
assert len(trips) == 2 and all(t["passed"] and t["steps"] == 10 and t["device"] == "cuda" for t in trips), trips
engine = lines("engine.jsonl")
assert [e["run"] for e in engine] == ["train_no_shard", "train_no_shard_trace", "train_xl_full_shard_ckpt"], engine
assert all(e["tokens_per_s"] > 0 and e["nvidia_smi_peak_mib"] == 2048 for e in engine), engine
assert lines("gaps_no_shard.jsonl")[-1]["steps"] == 4, "gaps: not the 6 steps less 2 skipped"
assert lines("plan_xl.jsonl")[0]["model_state_bytes"] > 0
bench = lines("bench.jsonl")
assert sorted(b["path"] for b in bench) == ["engine"] * 4 + ["whole"] * 2, bench
for name in ("gpu_kernels_test", "gpu_device_ops_test", "gpu_executor_test"):
    assert json.load(open(f"{out}/{name}.json"))["failures"] == 0, name
PY

# What `speed` says and writes: B = 8 and 16 of unfused, fused and lean, PyTorch's (B = 16 eager: the fake's compile
# fails), XL shapes lean.
grep -q "torch.compile failed (exit 1): PyTorch GPT-2, B=16, eager" "$work/speed.log" ||
  { cat "$work/speed.log"; fail "no eager run after torch.compile failed"; }
python3 - "$work/s/speed.jsonl" <<'PY' || { cat "$work/speed.log"; fail "PyTorch's lines are not B=8 compiled, B=16 eager"; }
import json, sys
torch = [(r["batch"], r["compiled"]) for r in map(json.loads, open(sys.argv[1])) if r["bench"] == "pytorch_gpt2"]
assert torch == [(8, True), (16, False)], torch
PY
[[ $(grep -c '^{' "$work/s/speed.jsonl") == 9 ]] || { cat "$work/speed.log"; fail "speed.jsonl has not 9 JSON lines"; }
[[ $(grep -c "^{'bench': " "$work/speed.log") == 9 ]] || { cat "$work/speed.log"; fail "speed's table not printed"; }
[[ $(grep -c '^declined: cuBLASLt has no fused kernel for D\[8192x3072\]' "$work/speed.log") == 1 ]] ||
  { cat "$work/speed.log"; fail "the benches' declined GEMM not named once"; }

# The outer limit's TERM while a section runs (a gtest that hangs): the trap says how far the run came at once and
# stops the section's command, which no TERM reached before (bash held the trap until the command's own limit).
marker=$work/hung_gtest_started
cat >"$pack/bin/gpu_device_ops_test.hang" <<FAKE
#!/usr/bin/env bash
touch "$marker"
exec sleep 300
FAKE
chmod +x "$pack/bin/gpu_device_ops_test.hang"
mv "$pack/bin/gpu_device_ops_test" "$pack/bin/gpu_device_ops_test.ok"
cp "$pack/bin/gpu_device_ops_test.hang" "$pack/bin/gpu_device_ops_test"
# env (not in_fake_world, a function run in a subshell here) execs bash: $! is the script's own process.
env "${fake_world[@]}" bash "$fake_repo/tests/gpu/device_check.sh" run "$pack" "$work/t" >"$work/term.log" 2>&1 &
script=$!
for _ in $(seq 100); do [[ -e $marker ]] && break; sleep 0.1; done
[[ -e $marker ]] || { kill "$script"; cat "$work/term.log"; fail "the hanging gtest never started"; }
# The hung gtest's sleep: this test's, as its environment names this test's calls folder.
hung_left() {
  local pid
  for pid in $(pgrep -x sleep || true); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "HSDP_FAKE_CALLS=$calls" && { echo "$pid"; return; }
  done
  return 0
}
kill -TERM "$script"
for _ in $(seq 50); do kill -0 "$script" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$script" 2>/dev/null; then
  kill -KILL "$script"
  left=$(hung_left)
  [[ -z $left ]] || kill "$left"
  cat "$work/term.log"
  fail "the run still ran 5 s after its TERM"
fi
code=0
wait "$script" || code=$?
((code == 1)) || { cat "$work/term.log"; fail "after TERM: exit $code, not 1"; }
grep -q "^status 1: terminated at .* s (status so far 0)$" "$work/term.log" ||
  { cat "$work/term.log"; fail "the TERM trap said nothing"; }
# It ends with the run (timeout passes the TERM on to it), within seconds.
for _ in $(seq 50); do [[ -z $(hung_left) ]] && break; sleep 0.1; done
left=$(hung_left)
[[ -z $left ]] || { kill "$left"; fail "the hung gtest's command outlived the run by 5 s"; }
mv "$pack/bin/gpu_device_ops_test.ok" "$pack/bin/gpu_device_ops_test"

# The fakes' calls, given to the real programs. hsdp-bench-train-gpu checks its options and the deck's keys, then
# stops with 77 where no GPU is visible (2: a bad option). hsdp-train --check-config checks every key and the checks
# across keys without touching a device, so device.type=cuda is taken as it is. One process each: no orted. No GPU
# visible to them (CUDA_VISIBLE_DEVICES empty), so that on a machine with one they stop where they would here.
export OMPI_MCA_ess_singleton_isolated=1 PYTHONDONTWRITEBYTECODE=1 CUDA_VISIBLE_DEVICES=
declare -A checked=()
given() { # PROGRAM EXPECTED ARGS...: PROGRAM ARGS... exits EXPECTED (once for each distinct call)
  local program=$1 expected=$2 code=0 key
  shift 2
  key="$program $(printf '%q ' "$@")"
  [[ -z ${checked[$key]:-} ]] || return 0
  checked[$key]=1
  "$program" "$@" >"$work/given.log" 2>&1 || code=$?
  ((code == expected)) || { cat "$work/given.log"; fail "$key: exit $code, not $expected"; }
}
bench_calls=$(compgen -G "$calls/hsdp-bench-train-gpu.*" | wc -l)
((bench_calls == 11)) || fail "$bench_calls calls of hsdp-bench-train-gpu, not 11"
for call in "$calls"/hsdp-bench-train-gpu.*; do
  mapfile -d '' -t args <"$call"
  given "$build/bin/hsdp-bench-train-gpu" 77 "${args[@]}"
done
cuda_trains=0
for call in "$calls"/hsdp-train.*; do
  mapfile -d '' -t args <"$call"
  device=cpu
  for a in "${args[@]}"; do [[ $a != --device.type=* ]] || device=${a#--device.type=}; done
  [[ $device == cuda ]] || continue
  given "$build/bin/hsdp-train" 0 "${args[@]}" --check-config
  cuda_trains=$((cuda_trains + 1))
done
((cuda_trains == 7)) || fail "$cuda_trains calls of hsdp-train with device.type=cuda, not 7"
# hsdp-selfcheck's own checks of its input (options, rows, --set keys through hsdp-train --print-config, --work,
# --json) come before its first run, hsdp-data synth: with a --data that fails there, past them is exit 1 and its
# message (bad input: exit 2). Its --work and --json go to a folder of this test.
for call in "$calls"/hsdp-selfcheck.*; do
  mapfile -d '' -t args <"$call"
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    case ${args[i]} in
    --train) args[i + 1]=$build/bin/hsdp-train ;;
    --data) args[i + 1]=$(type -P false) ;;
    --work) args[i + 1]=$work/selfcheck_given/work ;;
    --json) args[i + 1]=$work/selfcheck_given/rows.jsonl ;;
    esac
  done
  rm -rf "$work/selfcheck_given"
  mkdir -p "$work/selfcheck_given"
  given "$repo/tools/selfcheck/hsdp-selfcheck" 1 "${args[@]}"
  grep -q "the reference failed: hsdp-data synth exited" "$work/given.log" ||
    { cat "$work/given.log"; fail "hsdp-selfcheck stopped elsewhere than at its first run"; }
done
# pytorch_gpt2.py parses its options, then stops with 77 where torch (or a GPU) is missing; 2: a bad option.
for call in "$calls"/pytorch_gpt2.*; do
  mapfile -d '' -t args <"$call"
  given python3 77 "$repo/tools/bench/pytorch_gpt2.py" "${args[@]}"
done
selfchecks=$(compgen -G "$calls/hsdp-selfcheck.*" | wc -l) pytorch=$(compgen -G "$calls/pytorch_gpt2.*" | wc -l)
((selfchecks == 6 && pytorch == 3)) || fail "$selfchecks self-checks (not 6), $pytorch PyTorch benches (not 3)"
echo "device_check.sh run (all) and run speed on a fake GPU in ${SECONDS} s: status 0, every section's files," \
  "the speed table, declined GEMMs named; the real programs accept the fakes' calls ($bench_calls benches," \
  "$cuda_trains hsdp-train on cuda, $selfchecks self-checks, $pytorch PyTorch benches)"
