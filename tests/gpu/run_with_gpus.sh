#!/usr/bin/env bash
# Runs an MPI GPU test with one rank per visible GPU, or skips it when none is visible (prints the reason and
# exits 77, the gpu label's SKIP_RETURN_CODE).
#   run_with_gpus.sh <gpu_probe> <launcher and its arguments...> -- <test binary and its arguments...>
# The rank count is appended to the launcher's arguments as `-np <GPUs>`.
set -u
# shellcheck source=gpu_lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu_lib.sh"
require_gpu "$1"
shift
split_launcher "$@"
echo "run_with_gpus: $gpu_count GPU(s) visible: ${launcher[*]} -np $gpu_count ${program[*]}"
exec "${launcher[@]}" -np "$gpu_count" "${program[@]}"
