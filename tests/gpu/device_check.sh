#!/usr/bin/env bash
# The GPU checks a lent GPU machine runs in one call. GPU machines are lent rarely and briefly, and have CUDA but
# not our Debian libraries (Open MPI, OpenBLAS, Boost): build here, pack the binaries with the libraries they load
# and Open MPI's runtime, carry the pack, run it there.
#
#   tests/gpu/device_check.sh pack [BUILD] [DIR] [BASELINE]
#                                                   here: the GPU tests, hsdp-train, -data, -ckpt, -plan and the GPU
#                                                   bench of BUILD (default build; built first, so the pack is the
#                                                   sources as they are; PACKED in it names the commit), the
#                                                   libraries they load (not glibc's, the C++ runtime's nor CUDA's:
#                                                   the GPU machine has its own) and Open MPI's and PMIx's installed
#                                                   files, as one DIR/pack.tar.xz (default DIR .gpu); with BASELINE,
#                                                   the bench of that build too, as hsdp-bench-train-gpu-whole
#   tests/gpu/device_check.sh baseline [DIR]        here: builds in DIR (default /tmp/hsdp-baseline) the bench at
#                                                   the last commit with the whole-model path ($baseline_rev), for
#                                                   pack's BASELINE (DIR/build)
#   tests/gpu/device_check.sh run [DIR] [OUT] [all|tests|cpu|speed]
#                                                   there: the gtests (kernels, GPT by unit, DeviceOps, executor;
#                                                   a binary's failed tests again under compute-sanitizer's memcheck
#                                                   and racecheck);
#                                                   then (all) hsdp-selfcheck --device cuda on 1 rank (GPT-2, and
#                                                   3 rows of a Llama; 3 rows with fused attention and
#                                                   epilogues), on 2x2 ranks
#                                                   sharing the GPU (comm.intra=mpi) and with device.streams=check,
#                                                   the checkpoint round trip 4 GPU ranks <-> 1 CPU rank, GPT-2 124M
#                                                   through the engine (bench and hsdp-train, and its compute
#                                                   stream's idle gaps from log.trace: gaps_no_shard.jsonl) beside the
#                                                   baseline's whole-model path where packed, GPT-2 XL shapes
#                                                   full_shard with checkpointing; `cpu`: the pack's MPI checks on
#                                                   CPU ranks only (no GPU: what CI runs); `speed`: issue
#                                                   39's fused vs unfused attention and GEMM epilogues,
#                                                   PyTorch's compiled GPT-2 (B = 8, 16) and XL shapes
#                                                   lean; output under OUT
#                                                   (default $OUT, else DIR/out)
# With the device tool: `echo /.gpu/ >> .git/info/exclude; tests/gpu/device_check.sh baseline;
# tests/gpu/device_check.sh pack build .gpu /tmp/hsdp-baseline/build`, then run with carry [".gpu"] the command
# `mkdir -p /tmp/o; timeout -k 10 470 bash tests/gpu/device_check.sh run .gpu /tmp/o >/tmp/o/run.log 2>&1;
# tar -C /tmp -cJf $OUT/o.tar.xz --exclude=checkpoints --exclude='*.h5' --exclude='*.bin' o; tail -c 11000
# /tmp/o/run.log` (the tool brings back a few files and the output's tail: the logs as one archive), then the same
# with /tmp/s for /tmp/o and `run .gpu /tmp/s speed` (OUT is a folder of its own: run refuses one that holds an
# earlier run's results). Each section's header shows the seconds since the start; a gtest binary, a self-check and
# a run each have a time limit of their own, so that a hang costs its section, not the call.
# Exit status of run: non-zero when a gtest, a self-check row or the round trip failed (the benchmarks report).
set -uo pipefail

binaries=(gpu_probe gpu_kernels_test gpu_device_ops_test gpu_executor_test hsdp-bench-train-gpu
          hsdp-train hsdp-data hsdp-ckpt hsdp-plan)
# Open MPI's launcher, daemon, components and help texts, and PMIx's, as Debian installs them: the GPU machine has
# none, and hsdp-train is an MPI program even on one rank. Copied from the installed packages (what `dpkg -x` of
# their .deb files would give) under DIR/root; run() relocates them (OPAL_PREFIX, PMIX_INSTALL_PREFIX).
mpi_packages=(openmpi-bin libopenmpi3 openmpi-common libpmix2)
# The last commit whose hsdp-bench-train-gpu had the whole-model path (GptParameters and GptCuda's whole-model
# calls), which the engine's tokens/s is compared with (issue 34: at least 0.97x).
baseline_rev=5a6395b

baseline() {
  local dir=${1:-/tmp/hsdp-baseline} root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  [[ -d $dir ]] || git -C "$root" worktree add --detach "$dir" "$baseline_rev" || exit 2
  cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DHSDP_CUDA=ON -DBUILD_TESTING=OFF >/dev/null || exit 2
  cmake --build "$dir/build" -j "$(nproc)" --target hsdp-bench-train-gpu >/dev/null || exit 2
  echo "$dir/build (remove with: git worktree remove --force $dir)"
}

# Every library FILES load, resolved (cp -L) into DIR/lib, but not glibc's (the machine's own loader must match it),
# the C++ runtime's (the machine's is as new or newer, and CUDA's libraries there need it) nor CUDA's.
copy_libraries() { # DIR FILES...
  local dir=$1
  shift
  for f in "$@"; do ldd "$f" 2>/dev/null; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
}

pack() {
  local build=${1:-build} dir=${2:-.gpu} base=${3:-} root packed
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  packed="commit $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown), packed $(date -u +%FT%TZ)"
  # The binaries as the sources are now (a pack of an older build would test old code with this script).
  cmake --build "$build" -j "$(nproc)" --target "${binaries[@]}" >/dev/null ||
    { echo "device_check.sh: cannot build ${binaries[*]} in $build" >&2; exit 2; }
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib" "$dir/root"
  echo "$packed" >"$dir/PACKED"
  for b in "${binaries[@]}"; do
    [[ -x $build/bin/$b ]] || { echo "device_check.sh: $build/bin/$b is missing (a build with CUDA?)" >&2; exit 2; }
    cp "$build/bin/$b" "$dir/bin/"
  done
  local extra=()
  if [[ -n $base ]]; then
    [[ -x $base/bin/hsdp-bench-train-gpu ]] ||
      { echo "device_check.sh: no $base/bin/hsdp-bench-train-gpu" >&2; exit 2; }
    cp "$base/bin/hsdp-bench-train-gpu" "$dir/bin/hsdp-bench-train-gpu-whole"
    extra+=("$dir/bin/hsdp-bench-train-gpu-whole")
  fi
  local p f
  for p in "${mpi_packages[@]}"; do
    dpkg -L "$p" >/dev/null || { echo "device_check.sh: package $p is not installed" >&2; exit 2; }
    dpkg -L "$p" | grep -Ev '^/usr/share/(doc|man|lintian)/' | while read -r f; do
      [[ -f $f && ! -L $f ]] && mkdir -p "$dir/root${f%/*}" && cp -p "$f" "$dir/root$f"
    done
  done
  ln -s orterun "$dir/root/usr/bin/mpirun" # Debian's mpirun is an alternatives link out of the tree
  mapfile -t components < <(find "$dir/root" -name '*.so' -type f)
  copy_libraries "$dir" "${binaries[@]/#/$build/bin/}" "$dir/root/usr/bin/orted" "$dir/root/usr/bin/orterun" \
    "${components[@]}" "${extra[@]}"
  # The carried tree is limited in size (OpenBLAS alone is 36 MB): one compressed file, unpacked by run().
  # HSDP_PACK_XZ_OPT: xz's options (CI's pack test, which carries nothing, packs fast with -0).
  XZ_OPT=${HSDP_PACK_XZ_OPT:--T0} tar -C "$dir" -cJf "$dir.tar.xz" PACKED bin lib root
  rm -rf "$dir"
  mkdir -p "$dir"
  mv "$dir.tar.xz" "$dir/pack.tar.xz"
  du -sh "$dir/pack.tar.xz"
  echo "$packed"
}

# The packed Open MPI and PMIx, relocated to DIR/root, on shared memory only (ob1 and vader: MPI carries host
# buffers here, the staged path's), allowed as root (the GPU machine runs commands as root).
mpi_environment() { # DIR
  local root=$1/root
  export OPAL_PREFIX=$root/usr
  export PMIX_INSTALL_PREFIX=$root/usr/lib/x86_64-linux-gnu/pmix2
  export PATH=$root/usr/bin:$PATH
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader OMPI_MCA_osc=sm,pt2pt
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PMIX_MCA_pcompress_base_silence_warning=1 # the packed PMIx finds no zlib component: harmless, not shown
  export HSDP_MPIRUN="$root/usr/bin/mpirun --oversubscribe"
}

# CUDA's libraries where the machine keeps them: the toolkit's folders, else the pip wheels of PyTorch's install.
cuda_library_path() {
  local found
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e $d/libcublasLt.so.13 ]] && { echo "$d"; return; }
  done
  found=$(find / -xdev -name 'libcublasLt.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
  [[ -n $found ]] && dirname "$found"
  found=$(find / -xdev -name 'libcudart.so.13' -not -path '*/proc/*' 2>/dev/null | head -1)
  [[ -n $found ]] && dirname "$found"
}

# A command under a time limit (timeout -k 10 SECONDS COMMAND...), started in the background and waited for: bash
# runs a trap only once the foreground command has ended, so the outer limit's TERM would wait for the command (up to
# its own limit) and the outer -k would kill the run before the trap said how far it came; `wait` returns to the
# trap at once, and the trap stops the command (timeout passes the TERM on to it).
running='' sampler=''
limited() { # SECONDS COMMAND...
  timeout -k 10 "$@" 3>&- &
  running=$!
  wait "$running"
  local code=$?
  running=
  return "$code"
}

# A bench's output: its JSON line (the last of stdout, when it is one) into bench.jsonl, the table's end and the
# warnings' (stderr, kept in NAME.err: cuBLASLt's declined fused GEMMs among them) on stdout.
bench_output() { # NAME
  tail -n 1 "$out/$1.log" | grep '^{' >>"$out/bench.jsonl"
  tail -n 4 "$out/$1.log"
  tail -n 6 "$out/$1.err"
}

bench() { # NAME ARGS...: the engine's bench on one rank: its JSON line into bench.jsonl, its table into NAME.log
  local name=$1 code
  shift
  echo "== [${SECONDS} s] hsdp-bench-train-gpu $*"
  limited 300 $HSDP_MPIRUN -np 1 "$dir/bin/hsdp-bench-train-gpu" "$@" >"$out/$name.log" 2>"$out/$name.err"
  code=$?
  bench_output "$name"
  return "$code"
}

whole() { # NAME ARGS...: the baseline's whole-model path, where packed
  local name=$1
  shift
  [[ -x $dir/bin/hsdp-bench-train-gpu-whole ]] ||
    { echo "== [${SECONDS} s] $name: no baseline packed (pack's BASELINE)"; return; }
  echo "== [${SECONDS} s] hsdp-bench-train-gpu-whole --path whole $*"
  limited 300 "$dir/bin/hsdp-bench-train-gpu-whole" --path whole "$@" >"$out/$name.log" 2>"$out/$name.err"
  bench_output "$name"
}

gtest() { # BINARY: its tests, the log under OUT, the summary and any failure on stdout (a hung kernel: 240 s)
  echo "== [${SECONDS} s] $1"
  limited 240 "$dir/bin/$1" --gtest_output="json:$out/$1.json" >"$out/$1.log" 2>&1
  local status=$?
  ((status == 124)) && echo "TIMEOUT: $1 ran 240 s; the last test started: $(grep '^\[ RUN' "$out/$1.log" | tail -n 1)"
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]|^  unit |^(gpt2 |llama )?(float|bf16)( [a-z ]+)?: |^cuBLASLt has no kernel' \
    "$out/$1.log"
  grep -B2 -A10 'Failure' "$out/$1.log" | head -60
  ((status != 0 && status != 124)) && sanitize "$1" "$out/$1.log"
  return $status
}

# The tests a gtest LOG reports failed, one a line, as --gtest_filter takes them (a parameterised test's name
# without gtest's ", where GetParam() = ..." after it); none reported (the binary crashed): the last one started.
failed_tests() { # LOG
  awk '/^\[ RUN      \] / { last = $4 }
       /^\[  FAILED  \] [^ ]+\.[^ ]+/ {
         name = $4
         sub(/,$/, "", name)
         if (!(name in seen)) { seen[name]; n++; print name }
       }
       END { if (n == 0 && last != "") print last }' "$1"
}

# A failed gtest binary's first three failed tests again under compute-sanitizer, memcheck then racecheck (nothing
# when all passed): an out-of-bounds access or a shared-memory race is then named with its kernel, so the fix needs
# no second call of a lent GPU's few minutes. Each tool gets 45 s, and all of them together sanitize_seconds, so
# that failures leave the later sections their time. Where the machine has no compute-sanitizer, or it refuses the
# device (it does under gVisor), its output says so.
sanitize_seconds=120
sanitize() { # BINARY LOG
  local sanitizer filter tool code limit start
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  [[ -x $sanitizer ]] || { echo "no compute-sanitizer on this machine: $1's failures not run under it"; return 0; }
  filter=$(failed_tests "$2" | head -n 3 | paste -sd:)
  [[ -n $filter ]] || return 0
  for tool in memcheck racecheck; do
    limit=$((sanitize_seconds < 45 ? sanitize_seconds : 45))
    ((limit >= 10)) ||
      { echo "compute-sanitizer: this run's ${sanitize_seconds} s left, not run ($tool $1)"; continue; }
    echo "== [${SECONDS} s] compute-sanitizer --tool $tool $1 --gtest_filter=$filter (within $limit s)"
    start=$SECONDS
    limited "$limit" "$sanitizer" --tool "$tool" --print-limit 10 "$dir/bin/$1" --gtest_filter="$filter" \
      >"$out/$1.$tool.log" 2>&1
    code=$?
    sanitize_seconds=$((sanitize_seconds - (SECONDS - start)))
    ((code == 124)) && echo "TIMEOUT: compute-sanitizer --tool $tool ran $limit s"
    grep -E '^========= ' "$out/$1.$tool.log" | head -n 24
  done
  return 0
}

# The fused GEMMs that cuBLASLt had no kernel for on this GPU, run with the separate kernels instead (docs/gpu.md):
# hsdp-train's warnings in every log under OUT (the self-checks' runs too), each once.
declined_epilogues() {
  grep -rhoE 'cuBLASLt has no fused kernel for .* on this GPU' "$out" 2>/dev/null | sort -u | head -n 8 |
    sed 's/^/declined: /'
}

# hsdp-train on the packed MPI: NAME RANKS KEYS... into OUT/train/NAME (log and metrics), the quickstart model on
# synthetic data unless KEYS say otherwise.
train() {
  local name=$1 ranks=$2
  shift 2
  mkdir -p "$out/train"
  echo "== [${SECONDS} s] hsdp-train ($name, $ranks rank(s)) $*"
  limited 300 $HSDP_MPIRUN -np "$ranks" "$dir/bin/hsdp-train" --config "$repo/input/quickstart.ini" \
    --data.train="$out/data/train.bin" --data.val="$out/data/val.bin" --data.entropy_json="$out/data/source.json" \
    --train.eval_every=0 --log.every=1 --checkpoint.every=0 --log.dir="$out/train/$name" \
    --checkpoint.dir="$out/train/$name/checkpoints" "$@" >"$out/train/$name.log" 2>&1
  local status=$?
  tail -n 2 "$out/train/$name.log"
  return $status
}

# The checkpoint round trip between devices: 10 steps of the quickstart model as one run, as 4 ranks of DEVICE
# (full_shard, 2 per node sharing the device) for 5 steps resumed on 1 CPU rank, and the reverse; each against the
# one-CPU-rank reference within 2 D (hsdp-selfcheck's derived tolerance, D measured here from a bf16 reference).
round_trip() { # DEVICE
  local device=$1 status=0
  local four=(--parallel.sharding=full_shard --device.type="$device" --topology.ranks_per_node=2)
  [[ $device == cuda ]] && four+=(--comm.intra=mpi)
  local one=(--parallel.sharding=no_shard --device.type=cpu --train.grad_accum=4)
  train reference 1 "${one[@]}" --train.steps=10 --checkpoint.dir= || status=1
  train reference_bf16 1 "${one[@]}" --train.steps=10 --checkpoint.dir= --precision.param=bf16 \
    --precision.reduce=bf16 || status=1
  train four_then_one 4 "${four[@]}" --train.steps=10 --train.stop_at_step=5 || status=1
  mkdir -p "$out/train/four_then_one_b" && cp -r "$out/train/four_then_one/checkpoints" "$out/train/four_then_one_b/"
  train four_then_one_b 1 "${one[@]}" --train.steps=10 || status=1
  train one_then_four 1 "${one[@]}" --train.steps=10 --train.stop_at_step=5 || status=1
  mkdir -p "$out/train/one_then_four_b" && cp -r "$out/train/one_then_four/checkpoints" "$out/train/one_then_four_b/"
  train one_then_four_b 4 "${four[@]}" --train.steps=10 || status=1
  python3 - "$out/train" "$device" >>"$out/round_trip.jsonl" <<'PY' || status=1
import json, sys
root, device = sys.argv[1:]
def losses(*runs):
    return [json.loads(l)["loss"] for r in runs for l in open(f"{root}/{r}/metrics.jsonl") if l.strip()]
ref, bf16 = losses("reference"), losses("reference_bf16")
tolerance = 2 * max(abs(a - b) / abs(b) for a, b in zip(bf16, ref))
ok = True
for name in ("four_then_one", "one_then_four"):
    run = losses(name, name + "_b")
    gap = max(abs(a - b) / abs(b) for a, b in zip(run, ref)) if len(run) == len(ref) else float("inf")
    passed = gap <= tolerance and len(run) == 10
    ok &= passed
    print(json.dumps({"check": "round_trip", "device": device, "run": name, "steps": len(run), "loss_gap": gap,
                      "tolerance": tolerance, "passed": passed}))
sys.exit(0 if ok else 1)
PY
  tail -n 2 "$out/round_trip.jsonl"
  return $status
}

# hsdp-train through the engine on one GPU, GPT-2 shapes on synthetic 50257-token data: NAME KEYS...; the median
# tokens/s of the steps after the third, the engine's accounted and the device's measured memory, into engine.jsonl.
engine_bench() {
  local name=$1
  shift
  # The device's own figure, independent of hsdp's accounting: nvidia-smi's used memory every 100 ms, its maximum.
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$out/train/$name.nvsmi" 2>/dev/null 3>&- &
  sampler=$! # the trap stops it too
  train "$name" 1 --device.type=cuda --data.train="$out/data50k/train.bin" \
    --data.val="$out/data50k/val.bin" --data.entropy_json="$out/data50k/source.json" --model.n_layer=12 \
    --model.n_head=12 --model.n_embd=768 --model.block_size=1024 --model.vocab_size=50257 \
    --model.padded_vocab_size=50304 --train.micro_batch=8 --train.seq_len=1024 --train.steps=12 \
    --train.warmup_steps=2 --precision.param=bf16 --checkpoint.dir= "$@"
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  sampler=
  python3 - "$out/train/$name" "$name" "$*" <<'PY' | tee -a "$out/engine.jsonl"
import json, statistics, sys
path, name, keys = sys.argv[1:]
used = [int(l) for l in open(f"{path}.nvsmi") if l.strip().isdigit()]
lines = [json.loads(l) for l in open(f"{path}/metrics.jsonl") if l.strip()]
timed = lines[3:] or lines
print(json.dumps({"check": "engine", "run": name, "keys": keys, "steps": len(timed),
                  "tokens_per_s": statistics.median(l["tokens_per_s"] for l in timed),
                  "step_ms": statistics.median(l["step_ms"] for l in timed), "memory": lines[-1].get("memory"),
                  "nvidia_smi_peak_mib": max(used, default=None)}))
PY
}

# Issue 39's comparison, on this GPU in this call: GPT-2 124M (T = 1024, bf16, one GPU, no_shard) through the engine
# with model.attention=unfused and fused (and fused with model.gemm_epilogue=fused: "lean") at B = 8 and 16,
# PyTorch's compiled GPT-2 with flash attention
# (tools/bench/pytorch_gpt2.py, where torch is installed) at the same shapes, and GPT-2 XL shapes (48 x 1600, 25
# heads, B = 8) lean: every JSON line into speed.jsonl, a table at the end.
speed() {
  : >"$out/bench.jsonl"
  for b in 8 16; do
    bench "unfused_b$b" --batch "$b" --kernel_breakdown
    bench "fused_b$b" --batch "$b" --set model.attention=fused --kernel_breakdown
    bench "lean_b$b" --batch "$b" --set model.attention=fused --set model.gemm_epilogue=fused --kernel_breakdown
    if python3 -c "import torch" 2>/dev/null; then
      echo "== [${SECONDS} s] PyTorch GPT-2, B=$b, torch.compile, flash attention"
      # Where torch.compile fails (no C compiler for Triton, say), the eager model instead: its JSON line says
      # "compiled": false. Not after a time limit (124) or a skip (77): the eager run would end the same way.
      local log=$out/pytorch_b$b.log code=0
      limited 300 python3 "$repo/tools/bench/pytorch_gpt2.py" --batch "$b" >"$log" 2>&1 || code=$?
      if ((code != 0)); then
        tail -n 4 "$log"
        if ((code != 124 && code != 77)); then
          echo "== [${SECONDS} s] torch.compile failed (exit $code): PyTorch GPT-2, B=$b, eager, flash attention"
          log=$out/pytorch_b${b}_eager.log
          limited 120 python3 "$repo/tools/bench/pytorch_gpt2.py" --batch "$b" --no-compile >"$log" 2>&1
        fi
      fi
      grep '^{' "$log" | tail -n 1 | tee -a "$out/bench.jsonl"
    else
      echo "== [${SECONDS} s] PyTorch: not installed here"
    fi
  done
  bench xl_lean --n_layer 48 --n_embd 1600 --n_head 25 --steps 5 --warmup 2 --set model.attention=fused \
    --set model.gemm_epilogue=fused
  declined_epilogues
  cp "$out/bench.jsonl" "$out/speed.jsonl"
  python3 - "$out/speed.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    print({k: r[k] for k in ("bench", "attention", "gemm_epilogue", "batch", "n_layer", "step_ms", "ms_per_step",
                             "tokens_per_s", "mfu", "device_memory_bytes", "peak_memory_bytes", "kernels_ms")
           if k in r})
PY
}

run() {
  dir=${1:-.gpu}
  out=${2:-${OUT:-$dir/out}}
  local what=${3:-all}
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  for f in gpu.txt bench.jsonl selfcheck.jsonl speed.jsonl round_trip.jsonl; do
    [[ -e $out/$f ]] &&
      { echo "device_check.sh: $out holds an earlier run's results ($f): give a folder of its own"; exit 2; }
  done
  if [[ -f $dir/pack.tar.xz ]]; then # unpacked outside the carried tree, removed at exit
    unpacked=$(mktemp -d "${TMPDIR:-/tmp}/hsdp-gpu.XXXXXX")
    trap 'rm -rf "$unpacked"' EXIT
    tar -C "$unpacked" -xJf "$dir/pack.tar.xz" || { echo "device_check.sh: cannot unpack $dir/pack.tar.xz"; exit 2; }
    dir=$unpacked
  fi
  echo "pack: $(cat "$dir/PACKED" 2>/dev/null || echo "no PACKED record (an older pack)")"
  local cuda_lib status=0
  # The outer limit's TERM (timeout -k ... run), or an interrupt, still says how far the run came and stops the
  # running command (in timeout's own process group, so a terminal's ^C does not reach it). It says so on the run's
  # own output (fd 3), not into the log of the section it interrupts, whose redirection is in force.
  exec 3>&1
  trap 'echo "status 1: terminated at ${SECONDS} s (status so far $status)" >&3
        [[ -n $sampler ]] && kill "$sampler" 2>/dev/null
        [[ -n $running ]] && kill -TERM "$running" 2>/dev/null && wait "$running"
        exit 1' TERM INT
  cuda_lib=$(cuda_library_path | paste -sd:)
  export LD_LIBRARY_PATH=$dir/lib${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
  mpi_environment "$dir"
  [[ $what == tests ]] || "$dir/bin/hsdp-data" synth --out-dir "$out/data" >/dev/null ||
    { echo "device_check.sh: hsdp-data synth failed"; exit 2; }
  local selfcheck=("$repo/tools/selfcheck/hsdp-selfcheck" --train "$dir/bin/hsdp-train" --plan "$dir/bin/hsdp-plan"
                   --data "$dir/bin/hsdp-data" --ckpt "$dir/bin/hsdp-ckpt" --mpirun "$HSDP_MPIRUN")
  # A self-check within SECONDS (then its arguments): a hung row must not take the later sections' time.
  selfcheck_within() {
    local limit=$1
    shift
    limited "$limit" "${selfcheck[@]}" "$@"
    local code=$?
    ((code == 124)) && echo "TIMEOUT: hsdp-selfcheck $* ran $limit s"
    return "$code"
  }
  if [[ $what == cpu ]]; then # the packed MPI and tools without a GPU: what CI checks of the pack
    : >"$out/bench.jsonl"
    OMP_NUM_THREADS=1 selfcheck_within 120 --device cpu --rows full_shard,hybrid_shard+qgZ\ bf16 --steps 4 \
      --work "$out/selfcheck_cpu" --json "$out/selfcheck.jsonl" || status=1
    OMP_NUM_THREADS=1 round_trip cpu || status=1
    OMP_NUM_THREADS=1 bench bench_cpu --device cpu --n_layer 2 --n_embd 64 --n_head 4 --vocab_size 256 \
      --padded_vocab_size 256 --batch 2 --seq_len 32 --steps 2 --warmup 1 || status=1
    echo "status $status (${SECONDS} s)"
    return "$status"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  "$dir/bin/gpu_probe" || { echo "device_check.sh: no GPU visible"; exit 77; }
  if [[ $what == speed ]]; then
    speed
    return
  fi
  gtest gpu_kernels_test || status=1
  gtest gpu_device_ops_test || status=1
  gtest gpu_executor_test || status=1
  if [[ $what == tests ]]; then
    echo "gtest status $status (${SECONDS} s)"
    return "$status"
  fi
  # Every strategy and ZeRO++ through the engine on the GPU against the CPU: one rank (NCCL's groups are all of
  # one member), four ranks as 2 nodes x 2 sharing the GPU over MPI (staged), one row with the streams checked.
  echo "== [${SECONDS} s] hsdp-selfcheck, 1 cuda rank"
  selfcheck_within 180 --device cuda --ranks 1 --ranks-per-node 1 --steps 10 --work "$out/selfcheck_1" \
    --json "$out/selfcheck.jsonl" || status=1
  echo "== [${SECONDS} s] hsdp-selfcheck, 1 cuda rank, a Llama (llama_tiny.ini: RMSNorm, RoPE, SwiGLU, GQA kernels)"
  selfcheck_within 100 --device cuda --ranks 1 --ranks-per-node 1 --steps 10 --config "$repo/input/llama_tiny.ini" \
    --rows no_shard,full_shard\ bf16,full_shard+qwZ+hpZ+qgZ\ bf16 --work "$out/selfcheck_llama" \
    --json "$out/selfcheck_llama.jsonl" || status=1
  echo "== [${SECONDS} s] hsdp-selfcheck, 1 cuda rank, fused attention and GEMM epilogues (GPT-2, then the Llama)"
  selfcheck_within 100 --device cuda --ranks 1 --ranks-per-node 1 --steps 10 --set model.attention=fused \
    --set model.gemm_epilogue=fused --rows no_shard,full_shard\ bf16 --work "$out/selfcheck_lean" \
    --json "$out/selfcheck_lean.jsonl" || status=1
  selfcheck_within 60 --device cuda --ranks 1 --ranks-per-node 1 --steps 10 --config "$repo/input/llama_tiny.ini" \
    --set model.attention=fused --set model.gemm_epilogue=fused --rows full_shard\ bf16 \
    --work "$out/selfcheck_lean_llama" --json "$out/selfcheck_lean_llama.jsonl" || status=1
  echo "== [${SECONDS} s] hsdp-selfcheck, 2x2 cuda ranks sharing the GPU"
  selfcheck_within 240 --device cuda --ranks 4 --ranks-per-node 2 --steps 10 --set comm.intra=mpi \
    --work "$out/selfcheck_2x2" --json "$out/selfcheck_2x2.jsonl" || status=1
  echo "== [${SECONDS} s] hsdp-selfcheck, 2x2 cuda ranks, device.streams=check"
  selfcheck_within 120 --device cuda --ranks 4 --ranks-per-node 2 --steps 4 --set comm.intra=mpi \
    --set device.streams=check --rows full_shard,full_shard+qwZ+hpZ+qgZ\ bf16 --work "$out/selfcheck_check" \
    --json "$out/selfcheck_check.jsonl" || status=1
  echo "== [${SECONDS} s] a model beyond the GPU's memory is refused before allocation (exit 2, naming the GPU)"
  train beyond_memory 1 --device.type=cuda --model.n_embd=65536 --model.n_head=64 --train.steps=1 --checkpoint.dir=
  local code=$?
  if [[ $code != 2 ]] || ! grep -q "memory: this rank needs at least .* of GPU" "$out/train/beyond_memory.log"; then
    echo "FAIL: exit $code, expected 2 with the GPU named"
    status=1
  fi
  echo "== [${SECONDS} s] log.trace on the GPU: 4 ranks' timelines of CUDA events hold every unit's work in its step"
  limited 120 bash "$repo/tests/train/trace.sh" $HSDP_MPIRUN -np 4 -- "$dir/bin/hsdp-train" \
    "$repo/input/quickstart.ini" "$out/data" "$out/train/trace" --device.type=cuda --comm.intra=mpi || status=1
  echo "== [${SECONDS} s] checkpoint round trip, 4 cuda ranks <-> 1 cpu rank"
  round_trip cuda || status=1
  # GPT-2 124M, B = 8, T = 1024, bf16, one GPU: the engine (its bench, and hsdp-train) against the whole-model path
  # (the baseline's bench), side by side; then GPT-2 XL shapes full_shard with activation checkpointing.
  "$dir/bin/hsdp-data" synth --out-dir "$out/data50k" --vocab 50257 --train-tokens 4000000 --val-tokens 100000 \
    >/dev/null || status=1
  : >"$out/bench.jsonl"
  : >"$out/engine.jsonl"
  whole whole_1
  bench engine_1
  bench engine_2
  whole whole_2
  engine_bench train_no_shard --parallel.sharding=no_shard
  # Where the engine's step leaves the GPU idle (issue 34's 0.97x): the same run traced, the compute stream's gaps.
  engine_bench train_no_shard_trace --parallel.sharding=no_shard --train.steps=6 --log.trace=true
  python3 "$repo/tools/bench/trace_gaps.py" "$out/train/train_no_shard_trace/trace_rank0.json" --skip 2 --top 8 \
    >"$out/gaps_no_shard.jsonl" && tail -n 1 "$out/gaps_no_shard.jsonl"
  bench engine_ckpt --sharding full_shard --activation_checkpointing
  engine_bench train_xl_full_shard_ckpt --parallel.sharding=full_shard --train.activation_checkpointing=true \
    --model.n_layer=48 --model.n_embd=1600 --model.n_head=25 --train.steps=6
  bench xl_full_shard_ckpt --n_layer 48 --n_embd 1600 --n_head 25 --sharding full_shard --activation_checkpointing \
    --steps 5 --warmup 2
  "$dir/bin/hsdp-plan" --config "$repo/input/quickstart.ini" --model.n_layer=48 --model.n_embd=1600 \
    --model.n_head=25 --model.block_size=1024 --model.vocab_size=50257 --model.padded_vocab_size=50304 \
    --train.micro_batch=8 --train.seq_len=1024 --precision.param=bf16 --train.activation_checkpointing=true \
    --nodes 1 --ranks-per-node 1 --device cuda --json >"$out/plan_xl.jsonl" || status=1
  declined_epilogues
  echo "status $status (${SECONDS} s)"
  return "$status"
}

# Sourced (its test calls the functions), it defines them and does nothing.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0
case ${1:-} in
pack) shift; pack "$@" ;;
baseline) shift; baseline "$@" ;;
run) shift; run "$@" ;;
*) sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d'; exit 2 ;;
esac
