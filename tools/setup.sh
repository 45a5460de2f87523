#!/usr/bin/env bash
# Installs, only where missing, the Debian packages hsdp builds and runs with (and, with --tests, those its tests
# need). Idempotent: when everything is present it only checks (dpkg-query) and exits within a second.
# Works as root or through sudo. CUDA/NCCL are not installed here: they are used when /usr/local/cuda exists.
#   tools/setup.sh                    install what building and running hsdp needs (tools/quickstart.sh runs this)
#   tools/setup.sh --tests            also what the tests need (tools/test.sh runs this): slurm-wlm and munge for the
#                                     one-node Slurm cluster of the `slurm` label, shellcheck for
#                                     jobscripts_pass_shellcheck. FOR A TEST MACHINE ONLY: on a node that runs the
#                                     site's own Slurm it installs neither (a site Slurm: sinfo, slurmd or
#                                     slurmctld on PATH that no Debian package owns; the slurm tests then skip,
#                                     saying so), and it never starts a daemon (the tests start their
#                                     own, on their own ports, and stop them)
#   tools/setup.sh [--tests] --check  install nothing: list what is missing, exit 1 if anything is
#   tools/setup.sh --print-packages   print the package list (with the test packages), one a line
set -euo pipefail

packages=(
  cmake g++ make pkg-config
  openmpi-bin libopenmpi-dev libucx-dev ucx-utils libpmix-dev
  libhdf5-openmpi-dev hdf5-tools
  libboost-program-options-dev
  libgtest-dev
  libopenblas-dev
  libsentencepiece-dev
  gnuplot-nox
  python3 python3-numpy
)
test_packages=(slurm-wlm munge shellcheck)

mode=install tests=0
for arg in "$@"; do
  case $arg in
  --tests) tests=1 ;;
  --check) mode=check ;;
  --print-packages)
    printf '%s\n' "${packages[@]}" "${test_packages[@]}"
    exit 0
    ;;
  *)
    echo "usage: tools/setup.sh [--tests] [--check | --print-packages]" >&2
    exit 2
    ;;
  esac
done

if ((tests)); then
  # A Slurm command on PATH that no Debian package owns is the site's own installation.
  site_slurm=
  for command in sinfo slurmd slurmctld; do
    path=$(command -v "$command" 2>/dev/null) || continue
    dpkg-query -S "$(readlink -f "$path")" >/dev/null 2>&1 || site_slurm=$path
  done
  if [[ -n $site_slurm ]]; then
    echo "setup.sh: a site Slurm is installed ($site_slurm, not from a Debian package): not installing slurm-wlm" \
      "or munge; the slurm tests will skip" >&2
    packages+=(shellcheck)
  else
    packages+=("${test_packages[@]}")
  fi
fi

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
# No daemon starts while the packages install (slurm-wlm and munge would start slurmctld, slurmd and munged):
# invoke-rc.d asks policy-rc.d, and 101 means "not allowed". Ours is removed afterwards; one already there is kept.
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${sudo_cmd[@]}" tee "$policy" >/dev/null
  "${sudo_cmd[@]}" chmod +x "$policy"
  own_policy=1
fi
status=0
{ "${sudo_cmd[@]}" apt-get update -qq && "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
  status=$?
((own_policy)) && "${sudo_cmd[@]}" rm -f "$policy"
((status == 0)) || { echo "setup.sh: apt-get failed (exit $status)" >&2; exit "$status"; }
echo "setup.sh: done"
