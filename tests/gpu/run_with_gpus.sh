#!/usr/bin/env bash
# Runs an MPI GPU test with one rank per visible GPU, or skips it when none is visible (prints the reason and
# exits 77, the gpu label's SKIP_RETURN_CODE).
#   run_with_gpus.sh <gpu_probe> <launcher and its arguments...> -- <test binary and its arguments...>
# The rank count is appended to the launcher's arguments as `-np <GPUs>`.
set -u
probe=$1
shift
if ! count=$("$probe" --count); then
  echo "$count"
  exit 77
fi
launcher=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  launcher+=("$1")
  shift
done
shift
echo "run_with_gpus: $count GPU(s) visible: ${launcher[*]} -np $count $*"
exec "${launcher[@]}" -np "$count" "$@"
