#!/usr/bin/env bash
# Single-rank CPU training benchmark: GPT-2 124M shapes (L=12, C=768, H=12, V=50257 padded to 50304),
# B=4, T=64, 2 threads, one warm-up step then 10 timed steps of forward + backward + an AdamW-like update.
# Prints a table and one JSON line (see tools/bench/train_cpu.cpp for the FLOP count and the SGEMM
# reference). Builds hsdp-bench-train-cpu first if needed. Takes about a minute on an idle 2-core node.
#   tools/bench/train_cpu.sh                      the default run
#   tools/bench/train_cpu.sh --steps 3 --json     arguments go to the binary (--help lists them)
# Environment: HSDP_BUILD_DIR (default build), HSDP_JOBS (default: all cores), HSDP_BENCH_THREADS (2).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}
jobs=${HSDP_JOBS:-$(nproc)}
threads=${HSDP_BENCH_THREADS:-2}

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j "$jobs" --target hsdp-bench-train-cpu >/dev/null

# The binary sets OPENBLAS_CORETYPE itself (re-executing once) when OpenBLAS would fall back to its
# generic kernels on this CPU; OMP_* and OPENBLAS_NUM_THREADS are left to --threads.
exec "$build/bin/hsdp-bench-train-cpu" --threads "$threads" "$@"
