#!/usr/bin/env bash
# Installs, only where missing, the Debian packages hsdp builds and runs with.
# Idempotent: when everything is present it only checks (dpkg-query) and exits within a second.
# Works as root or through sudo. CUDA/NCCL are not installed here: they are used when /usr/local/cuda exists.
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  openmpi-bin libopenmpi-dev libucx-dev ucx-utils libpmix-dev
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libgtest-dev
  libopenblas-dev
  gnuplot-nox
  python3 python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  sudo_cmd=()
elif command -v sudo >/dev/null 2>&1; then
  sudo_cmd=(sudo)
else
  echo "setup.sh: missing packages (${missing[*]}) and neither root nor sudo is available" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup.sh: done"
