#!/usr/bin/env bash
# Single-GPU training benchmark through the sharding engine (no_shard by default; --sharding, --set for any deck
# key): GPT-2 124M (L=12, C=768, H=12, V=50257 padded to 50304), B=8, T=1024, bf16 compute copies and GEMMs
# (cuBLASLt, fp32 accumulation), hsdp's CUDA kernels for everything else, fp32 AdamW; 3 warm-up steps then 10 timed
# steps of forward + backward + norm + AdamW, each step's tokens/s and MFU. One rank as run here (MPI singleton);
# more ranks with mpirun -np N build/bin/hsdp-bench-train-gpu. Prints a table (tokens/s, TFLOP/s, MFU against the card's dense
# bf16 peak, naming the table entry used, and the step's TFLOP/s over an 8192^3 bf16 GEMM's measured in the same
# run) and one JSON line. Builds hsdp-bench-train-gpu first if needed.
#   tools/bench/train_gpu.sh                       the default run
#   tools/bench/train_gpu.sh --batch 16 --json     arguments go to the binary (--help lists them)
# Exit 77 with a message when no GPU is visible; 1 with a message when the build has no CUDA backend.
# Environment: HSDP_BUILD_DIR (default build), HSDP_JOBS (default: all cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}
jobs=${HSDP_JOBS:-$(nproc)}

configure=(cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release)
# Until tools/bench/CMakeLists.txt has `include(train_gpu.cmake)`, inject the target at the top level.
if ! grep -qE '^[[:space:]]*include\(train_gpu\.cmake\)' tools/bench/CMakeLists.txt &&
   ! grep -qE 'train_gpu' tools/bench/CMakeLists.txt; then
  configure+=("-DCMAKE_PROJECT_hsdp_INCLUDE=$root/tools/bench/train_gpu.cmake")
fi
"${configure[@]}" >/dev/null
if ! grep -q '^HSDP_CUDA_BACKEND:INTERNAL=ON' "$build/CMakeCache.txt"; then
  echo "train_gpu.sh: the build in $build has no CUDA backend (HSDP_CUDA=OFF or nvcc not found); see cmake/cuda.cmake" >&2
  exit 1
fi
cmake --build "$build" -j "$jobs" --target hsdp-bench-train-gpu >/dev/null
exec "$build/bin/hsdp-bench-train-gpu" "$@"
