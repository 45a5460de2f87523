#!/usr/bin/env bash
# The GPU machine's one command, checked without a GPU: `device_check.sh pack` from this build, then
# `device_check.sh run ... cpu` on a machine without Open MPI. That machine is this one in a mount namespace where
# the system's Open MPI and PMIx (components, help texts, launcher, daemon, libmpi, libopen-pal) are hidden, so the
# packed launcher, components and libraries are the only ones there: the self-check rows, the checkpoint round trip
# and the engine's bench must pass through them.
#
#   device_check_pack_test.sh DEVICE_CHECK BUILD WORK
set -euo pipefail
device_check=$1 build=$2 work=$3
if [[ $(id -u) != 0 ]] || ! unshare -m true 2>/dev/null; then
  echo "skipped: hiding the system's Open MPI needs root and mount namespaces (unshare -m)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
bash "$device_check" pack "$build" "$work/pack" >"$work/pack.log" 2>&1 || { cat "$work/pack.log"; exit 1; }
tail -n 1 "$work/pack.log"
hidden=(/usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi)
files=(/usr/bin/orted /usr/bin/orterun)
for lib in libmpi.so.40 libopen-pal.so.40 libopen-rte.so.40; do
  # awk reads to the end: an early exit would close the pipe on ldconfig (SIGPIPE), which pipefail and set -e turn
  # into a silent exit of this script whenever ldconfig had more to write.
  path=$(ldconfig -p | awk -v l="$lib" '$1 == l && !found { print $NF; found = 1 }')
  [[ -n $path ]] && files+=("$(readlink -f "$path")")
done
mkdir -p "$work/empty"
# shellcheck disable=SC2016 # expanded by the inner shell
unshare -m --propagation private bash -c '
  set -e
  empty=$1 ndirs=$2
  shift 2
  for ((i = 0; i < ndirs; i++)); do [[ -d $1 ]] && mount --bind "$empty" "$1"; shift; done
  while [[ $1 != -- ]]; do [[ -e $1 ]] && mount --bind /dev/null "$1"; shift; done
  shift
  if command -v ompi_info >/dev/null && ompi_info >/dev/null 2>&1; then echo "FAIL: the system Open MPI still runs"; exit 1; fi
  exec "$@"' hide "$work/empty" "${#hidden[@]}" "${hidden[@]}" "${files[@]}" -- \
  bash "$device_check" run "$work/pack" "$work/out" cpu
python3 - "$work/out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/selfcheck.jsonl")]
trips = [json.loads(l) for l in open(f"{sys.argv[1]}/round_trip.jsonl")]
assert len(rows) == 2 and all(r["passed"] for r in rows), rows
assert len(trips) == 2 and all(t["passed"] and t["steps"] == 10 for t in trips), trips
bench = [json.loads(l) for l in open(f"{sys.argv[1]}/bench.jsonl")]
assert len(bench) == 1 and bench[0]["path"] == "engine" and bench[0]["tokens_per_s"] > 0, bench
print("through the packed Open MPI: 2 self-check rows passed, the round trip 4 ranks <-> 1 rank both ways, the bench")
PY
