#!/usr/bin/env bash
# Installs what is missing, configures, builds, and runs every test through ctest. Exit status: ctest's.
#   tools/test.sh                 all tests (the unit and parallel labels cores + 1 at a time, then the rest alone)
#   tools/test.sh -L unit         arguments go to ctest (e.g. a label)
# Environment: HSDP_BUILD_DIR (default build), HSDP_JOBS (default: all cores), HSDP_CUDA (default AUTO).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}
jobs=${HSDP_JOBS:-$(nproc)}

tools/setup.sh --tests
# Warnings are errors here (not in a user's build); the CUDA targets are built wherever nvcc is (HSDP_CUDA=AUTO).
# Without a GPU they only have to compile warning-free: for one architecture (sm_90, the lent H100/H200's), not also
# the PTX for older cards (cmake/cuda.cmake's default), which halves nvcc's share of the build.
cuda_arch=()
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then cuda_arch=(-DCMAKE_CUDA_ARCHITECTURES="${HSDP_CUDA_ARCHITECTURES:-90}"); fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DHSDP_WERROR=ON -DHSDP_CUDA="${HSDP_CUDA:-AUTO}" "${cuda_arch[@]}" \
  >/dev/null
cmake --build "$build" -j "$jobs"
# One line on the gpu label: its tests run only where a CUDA device is visible (gpu_probe is built with CUDA).
if [[ -x "$build/bin/gpu_probe" ]] && grep -q "^HSDP_CUDA_BACKEND:INTERNAL=ON" "$build/CMakeCache.txt"; then
  if gpu=$("$build/bin/gpu_probe"); then
    echo "GPU: $gpu; the gpu tests will run"
  else
    echo "GPU: none visible (${gpu#no CUDA device visible: }); the gpu tests will be skipped"
  fi
else
  echo "GPU: this build has no CUDA backend (HSDP_CUDA=OFF or nvcc not found); the gpu tests will be skipped"
fi
cd "$build"
status=0
if (($# > 0)); then
  ctest --output-on-failure --timeout 900 "$@" || status=$?
else
  # The unit tests and those labelled parallel (no timing in their checks, and single processes or processes that
  # mostly start and exit: the fuzzers of the file readers, the bad-input checks) one more at a time than there are
  # cores, since many of them wait more than they compute (on 2 cores, 2026-11-29: 128 s two at a time, 92 s three
  # at a time, 80 s four), then every other test alone: the multi-rank, cluster and Slurm tests use every core and
  # time out if they share them. Each test of the first group has an Open MPI session folder of its own
  # (tests/CMakeLists.txt: two singleton starts at once can race in a shared one).
  ctest --output-on-failure --timeout 900 -j $((jobs + 1)) -L '^(unit|parallel)$' || status=$?
  ctest --output-on-failure --timeout 900 -LE '^(unit|parallel)$' || status=$?
fi
exit $status
