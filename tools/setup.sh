#!/usr/bin/env bash
# Installs, only where missing, the Debian packages hsdp builds, runs and tests with.
# Idempotent: when everything is present it only checks (dpkg-query) and exits within a second.
# Works as root or through sudo. CUDA/NCCL are not installed here: they are used when /usr/local/cuda exists.
#   tools/setup.sh                    install what is missing
#   tools/setup.sh --check            install nothing: list what is missing, exit 1 if anything is
#   tools/setup.sh --print-packages   print the package list, one a line
# The tests need all of them to run rather than skip: slurm-wlm (slurmctld, slurmd, sbatch, ...) and munge for the
# one-node cluster of the `slurm` label, shellcheck for ctest jobscripts_pass_shellcheck.
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
  slurm-wlm munge
  shellcheck
)

mode=install
case ${1:-} in
"") ;;
--check) mode=check ;;
--print-packages)
  printf '%s\n' "${packages[@]}"
  exit 0
  ;;
*)
  echo "usage: tools/setup.sh [--check | --print-packages]" >&2
  exit 2
  ;;
esac

# One dpkg-query for all of them (packages dpkg does not know are missing too).
declare -A installed=()
while read -r name status; do
  [[ $status == "install ok installed" ]] && installed[$name]=1
done < <(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null || true)
missing=()
for p in "${packages[@]}"; do
  [[ -n ${installed[$p]:-} ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $mode == check ]]; then
  echo "setup.sh: missing ${missing[*]} (run tools/setup.sh)" >&2
  exit 1
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
