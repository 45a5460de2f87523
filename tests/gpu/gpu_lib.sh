# shellcheck shell=bash
# Sourced by the gpu tests' scripts.

# require_gpu <gpu_probe>: sets gpu_count to the number of visible GPUs; where there is none, prints the probe's
# reason and exits 77 (the gpu label's SKIP_RETURN_CODE: ctest reports the test as skipped).
require_gpu() {
  if ! gpu_count=$("$1" --count); then
    echo "$gpu_count"
    exit 77
  fi
}

# split_launcher <launcher and its arguments...> -- <program and its arguments...>: sets the arrays `launcher`
# and `program` (for the caller: hence the shellcheck directive).
# shellcheck disable=SC2034
split_launcher() {
  launcher=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    launcher+=("$1")
    shift
  done
  shift
  program=("$@")
}
