#!/usr/bin/env bash
# Builds hsdp-bench-quant if needed and runs it: block-wise int8/int4 quantize, dequantize and the fused
# dequantize-reduce-requantize on 64 MiB of fp32, ONE OpenMP thread by default, next to memcpy of the same
# buffer in the same run. Prints a table and one JSON line per measurement.
#   tools/bench/quant.sh                   defaults (--mib 64 --threads 1 --reps 5 --block 2048)
#   tools/bench/quant.sh --threads 2       arguments go to hsdp-bench-quant (--help lists them)
# Environment: HSDP_BUILD_DIR (default build), HSDP_JOBS (default: all cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}
jobs=${HSDP_JOBS:-$(nproc)}

configure=(cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release)
# Until tools/bench/CMakeLists.txt has `include(quant.cmake)`, inject the target at the top level.
if ! grep -qE '^[[:space:]]*include\(quant\.cmake\)' tools/bench/CMakeLists.txt; then
  configure+=("-DCMAKE_PROJECT_hsdp_INCLUDE=$root/tools/bench/quant.cmake")
fi
"${configure[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target hsdp-bench-quant >/dev/null
exec "$build/bin/hsdp-bench-quant" "$@"
