#!/usr/bin/env bash
# Checkpoint bandwidth next to dd, on the same disk, in the same run. Builds hsdp-bench-ckpt if needed, then runs
# ROUNDS rounds; each round measures, with `sync; sleep PAUSE` between measurements (shared and cloud disks absorb
# bursts in a cache and then throttle, so runs are interleaved rather than batched):
#   dd       writes a file of the checkpoint's size (random bytes from /dev/shm, bs=4M, conv=fsync), then reads it
#            back cold: its pages are dropped first with `dd iflag=nocache count=0` (posix_fadvise DONTNEED, which
#            needs no root; /proc/sys/vm/drop_caches is not used);
#   hsdp     one save_checkpoint + load_checkpoint of GPT-2 124M with Adam state (1.49 GB of tensors) from NP ranks
#            holding equal disjoint ranges of every unit, read back cold the same way, per variant:
#              single_call             one collective MPI-IO call per rank (the default), Open MPI's defaults
#              single_call+individual  the same with OMPI_MCA_fcoll=individual (no two-phase aggregation)
#              per_dataset             one collective H5Dwrite/H5Dread per dataset (444 per checkpoint)
# The summary shows the median over rounds and the ratio to dd's median; GB = 1e9 bytes.
#   tools/bench/ckpt.sh
# Environment: HSDP_BUILD_DIR (default build), HSDP_JOBS, HSDP_BENCH_NP (4), HSDP_CKPT_BENCH_ROUNDS (3),
#   HSDP_CKPT_BENCH_PAUSE (5 s), HSDP_CKPT_BENCH_VARIANTS ("single_call single_call+individual per_dataset"),
#   HSDP_CKPT_BENCH_DIR (default ./bench_ckpt.tmp: put it on the file system to measure; new, empty or an earlier
#   ckpt.sh's, emptied at the end and removed if it was new; any other: exit 2, untouched).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}
jobs=${HSDP_JOBS:-$(nproc)}
np=${HSDP_BENCH_NP:-4}
rounds=${HSDP_CKPT_BENCH_ROUNDS:-3}
pause=${HSDP_CKPT_BENCH_PAUSE:-5}
variants=${HSDP_CKPT_BENCH_VARIANTS:-single_call single_call+individual per_dataset}
dir=${HSDP_CKPT_BENCH_DIR:-$root/bench_ckpt.tmp}

configure=(cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release)
# Until tools/bench/CMakeLists.txt has `include(ckpt.cmake)`, inject the target at the top level.
if ! grep -qE '^[[:space:]]*include\(.*ckpt\.cmake\)' tools/bench/CMakeLists.txt; then
  configure+=("-DCMAKE_PROJECT_hsdp_INCLUDE=$root/tools/bench/ckpt.cmake")
fi
"${configure[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target hsdp-bench-ckpt >/dev/null

launcher=(mpirun --oversubscribe -np "$np")
[[ $(id -u) -eq 0 ]] && launcher=(mpirun --oversubscribe --allow-run-as-root -np "$np")
# shellcheck source=tools/bench/own_dir.sh
source "$root/tools/bench/own_dir.sh"
existed=0
# shellcheck disable=SC2034 # read by the EXIT trap
[[ -d $dir ]] && existed=1
own_dir "$dir" HSDP_CKPT_BENCH_DIR ckpt.sh  # its own: emptied at the end, and removed if this run made it
dd_file=$dir/dd.bin
source_file=/dev/shm/hsdp_ckpt_bench_source.$$
results=$dir/results.$$
trap 'rm -f "$source_file"; find "$dir" -mindepth 1 -delete; ((existed)) || rmdir "$dir"' EXIT

# The checkpoint's tensor bytes: 3 (params, m, v) x 4 B x GPT-2 124M's logical parameters (wte 50257 rows).
C=768 L=12 V=50257 T=1024
params=$((V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C))
bytes=$((3 * 4 * params))
head -c "$bytes" /dev/urandom >"$source_file"  # random: no zero-detection shortcut anywhere; dd copies these bytes

settle() { sync; sleep "$pause"; }
# dd_seconds ARGS...: runs dd, prints the seconds it reports.
dd_seconds() { LC_ALL=C dd "$@" 2>&1 | awk -F', ' '/copied/ {sub(/ s$/, "", $(NF-1)); print $(NF-1)}'; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN {printf "%.3f", b / s / 1e9}'; }
# json_field LINE KEY: a number from a one-line JSON object.
json_field() { sed -E "s/.*\"$2\":([-0-9.e+]+).*/\1/" <<<"$1"; }

echo "# disk: $(df -h "$dir" | awk 'NR==2 {print $1 " (" $2 ") mounted on " $6}'), directory $dir"
echo "# $np ranks on $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds, ${pause} s pauses"
printf '%-24s %5s %9s %10s %9s %10s   %s\n' variant round write_s write_GB/s read_s read_GB/s "hsdp write phases (s)"
for round in $(seq 1 "$rounds"); do
  settle
  w=$(dd_seconds if="$source_file" of="$dd_file" bs=4M conv=fsync)
  dd if="$dd_file" iflag=nocache count=0 status=none
  r=$(dd_seconds if="$dd_file" of=/dev/null bs=4M)
  rm -f "$dd_file"
  printf '%-24s %5s %9.3f %10s %9.3f %10s\n' dd "$round" "$w" "$(gbps "$bytes" "$w")" "$r" "$(gbps "$bytes" "$r")"
  echo "dd $(gbps "$bytes" "$w") $(gbps "$bytes" "$r")" >>"$results"
  echo "{\"bench\":\"ckpt\",\"variant\":\"dd\",\"round\":$round,\"bytes\":$bytes,\"write_s\":$w,\"read_s\":$r}"
  for variant in $variants; do
    settle
    io=${variant%%+*}
    env_args=()
    [[ $variant == *+individual ]] && env_args=(env OMPI_MCA_fcoll=individual)
    line=$("${env_args[@]}" "${launcher[@]}" "$build/bin/hsdp-bench-ckpt" --dir "$dir/ckpt" --io "$io" --reps 1 \
           --json-only)
    ws=$(json_field "$line" write_s)
    rs=$(json_field "$line" read_s)
    phases=$(printf 'checksum %.2f create %.2f data %.2f close %.2f commit %.2f' "$(json_field "$line" checksum_s)" \
             "$(json_field "$line" create_s)" "$(json_field "$line" data_s)" "$(json_field "$line" close_s)" \
             "$(json_field "$line" commit_s)")
    printf '%-24s %5s %9.3f %10s %9.3f %10s   %s\n' "$variant" "$round" "$ws" "$(gbps "$bytes" "$ws")" "$rs" \
      "$(gbps "$bytes" "$rs")" "$phases"
    echo "$variant $(gbps "$bytes" "$ws") $(gbps "$bytes" "$rs")" >>"$results"
    echo "${line%\}},\"variant\":\"$variant\",\"round\":$round}"
  done
done | tee "$dir/log.$$" | grep -v '^{'

# Medians over rounds.
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
column_median() { awk -v k="$1" -v c="$2" '$1 == k {print $c}' "$results" | median; }
dd_write=$(column_median dd 2)
dd_read=$(column_median dd 3)
echo
printf '%-44s %11s %11s %11s %11s\n' "median of $rounds rounds ($bytes B)" "write GB/s" "read GB/s" "write / dd" "read / dd"
printf '%-44s %11s %11s %11s %11s\n' "dd bs=4M conv=fsync; cold read" "$dd_write" "$dd_read" 1.00 1.00
summary="{\"bench\":\"ckpt_summary\",\"ranks\":$np,\"rounds\":$rounds,\"bytes\":$bytes,\"dd_write_gbps\":$dd_write,\"dd_read_gbps\":$dd_read"
for variant in $variants; do
  w=$(column_median "$variant" 2)
  r=$(column_median "$variant" 3)
  wr=$(awk -v a="$w" -v b="$dd_write" 'BEGIN {printf "%.2f", a / b}')
  rr=$(awk -v a="$r" -v b="$dd_read" 'BEGIN {printf "%.2f", a / b}')
  printf '%-44s %11s %11s %11s %11s\n' "hsdp $variant, $np ranks" "$w" "$r" "$wr" "$rr"
  summary+=",\"${variant/+/_}\":{\"write_gbps\":$w,\"read_gbps\":$r,\"write_vs_dd\":$wr,\"read_vs_dd\":$rr}"
done
echo
grep '^{' "$dir/log.$$"
rm -f "$dir/log.$$"
echo "$summary}"
