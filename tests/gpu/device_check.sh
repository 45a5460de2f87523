#!/usr/bin/env bash
# The GPU checks a lent GPU machine runs in one call. GPU machines are lent rarely and briefly, and have CUDA but
# not our Debian libraries (Open MPI, OpenBLAS, Boost): build here, pack the binaries with the libraries they load,
# carry the folder, run it there.
#
#   tests/gpu/device_check.sh pack [BUILD] [DIR]   here: copy the GPU test and benchmark binaries of BUILD (default
#                                                   build) and the libraries they load into DIR (default .gpu), except
#                                                   glibc's, the C++ runtime's and CUDA's (the GPU machine has its own)
#   tests/gpu/device_check.sh run [DIR] [OUT] [tests]  there: the GPU's kernels, the GPT by unit, the engine's
#                                                   DeviceOps against the CPU and the CUDA executor (gtest), then
#                                                   (unless `tests`) the
#                                                   training benchmarks (GPT-2 124M: whole-model
#                                                   calls against unit calls, side by side, and with activation
#                                                   checkpointing; GPT-2 XL shapes with and without checkpointing);
#                                                   logs and JSON lines under OUT (default $OUT, else DIR/out)
# With the device tool: `echo /.gpu/ >> .git/info/exclude; tests/gpu/device_check.sh pack`, then run with carry
# [".gpu"] the command `bash tests/gpu/device_check.sh run .gpu "$OUT"`.
# Exit status of run: non-zero when a gtest binary failed (the benchmarks only report).
set -uo pipefail

binaries=(gpu_probe gpu_kernels_test gpu_device_ops_test gpu_executor_test hsdp-bench-train-gpu)

pack() {
  local build=${1:-build} dir=${2:-.gpu}
  rm -rf "$dir"
  mkdir -p "$dir/bin" "$dir/lib"
  for b in "${binaries[@]}"; do
    [[ -x $build/bin/$b ]] || { echo "device_check.sh: $build/bin/$b is missing (a build with CUDA?)" >&2; exit 2; }
    cp "$build/bin/$b" "$dir/bin/"
  done
  # Every library the binaries load, resolved (cp -L), but not glibc's (the machine's own loader must match it),
  # the C++ runtime's (the machine's is as new or newer, and CUDA's libraries there need it) nor CUDA's.
  for b in "${binaries[@]}"; do ldd "$build/bin/$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  du -sh "$dir"
  ls "$dir/bin" "$dir/lib"
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

bench() { # NAME ARGS...: one benchmark line into bench.jsonl, its table into NAME.log
  local name=$1
  shift
  echo "== hsdp-bench-train-gpu $*"
  timeout 300 "$dir/bin/hsdp-bench-train-gpu" "$@" | tee "$out/$name.log" | tail -n 1 >>"$out/bench.jsonl"
  tail -n 12 "$out/$name.log"
}

gtest() { # BINARY: its tests, the log under OUT, the summary and any failure on stdout
  echo "== $1"
  timeout 600 "$dir/bin/$1" --gtest_output="json:$out/$1.json" >"$out/$1.log" 2>&1
  local status=$?
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]|^  unit |^(float|bf16): ' "$out/$1.log"
  grep -B2 -A10 'Failure' "$out/$1.log" | head -60
  return $status
}

run() {
  dir=${1:-.gpu}
  out=${2:-${OUT:-$dir/out}}
  local what=${3:-all}
  mkdir -p "$out"
  local cuda_lib status
  cuda_lib=$(cuda_library_path | paste -sd:)
  export LD_LIBRARY_PATH=$dir/lib${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  "$dir/bin/gpu_probe" || { echo "device_check.sh: no GPU visible"; exit 77; }
  status=0
  gtest gpu_kernels_test || status=1
  gtest gpu_device_ops_test || status=1
  gtest gpu_executor_test || status=1
  if [[ $what == tests ]]; then
    echo "gtest status $status"
    return "$status"
  fi
  : >"$out/bench.jsonl"
  # Whole-model calls against unit calls, side by side (whole, units, units, whole), then checkpointing.
  bench whole_1 --path whole
  bench units_1 --path units
  bench units_2 --path units
  bench whole_2 --path whole
  bench units_ckpt --path units --activation_checkpointing
  # GPT-2 XL shapes (48 blocks, C = 1600, 25 heads), B = 8, T = 1024, with and without checkpointing.
  bench xl_ckpt --n_layer 48 --n_embd 1600 --n_head 25 --path units --activation_checkpointing --steps 5 --warmup 2
  bench xl --n_layer 48 --n_embd 1600 --n_head 25 --path units --steps 5 --warmup 2
  echo "gtest status $status"
  return "$status"
}

case ${1:-} in
pack) shift; pack "$@" ;;
run) shift; run "$@" ;;
*) sed -n '2,17p' "$0"; exit 2 ;;
esac
