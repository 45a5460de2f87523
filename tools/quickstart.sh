#!/usr/bin/env bash
# One command from a fresh clone to a running hsdp: installs what is missing, builds, then on the CPU with 4 MPI
# ranks emulating 2 nodes x 2 ranks: prints the process mesh, benchmarks the collectives, writes a synthetic
# data set with a known entropy rate and trains a small GPT on it (input/quickstart.ini); last, trains the same model
# on text (hsdp's docs as bytes, input/own_text.ini) and writes a sample a person can read. It builds every program a
# user runs (hsdp-train, -data, -ckpt, -sample, -plan, -commbench, -bench-train-cpu; hsdp-sweep and hsdp-selfcheck are
# links in build/bin) and ends with what to do next.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build=${HSDP_BUILD_DIR:-build}

tools/setup.sh
# The programs, not the tests (tools/test.sh builds those). The CUDA backend only where a GPU is visible
# (HSDP_CUDA=AUTO|ON|OFF decides instead; an existing build directory keeps its choice).
cuda=()
if [[ -n ${HSDP_CUDA:-} ]]; then
  cuda=(-DHSDP_CUDA="$HSDP_CUDA")
elif [[ ! -f $build/CMakeCache.txt ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=(-DHSDP_CUDA=OFF)
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target hsdp-train hsdp-data hsdp-commbench hsdp-ckpt hsdp-sample hsdp-plan hsdp-bench-train-cpu

mpirun=(mpirun --oversubscribe -np 4)
[[ $(id -u) -eq 0 ]] && mpirun+=(--allow-run-as-root)

echo
echo "== the process mesh: 4 ranks as 2 emulated nodes x 2 ranks, hybrid_shard"
"${mpirun[@]}" "$build/bin/hsdp-train" --print-mesh --parallel.sharding=hybrid_shard --topology.ranks_per_node=2

echo
echo "== hsdp-commbench: collectives over the world, intra-node and inter-node groups (tables in runs/commbench.txt)"
mkdir -p runs
"${mpirun[@]}" "$build/bin/hsdp-commbench" --topology.ranks_per_node=2 --factor=4 --min-bytes=16 >runs/commbench.txt
echo "$(grep -c '' runs/commbench.txt) lines: every collective, message size and group, time and bus bandwidth"

echo
echo "== hsdp-data synth: a Markov source whose exact entropy rate is the best loss any model can reach"
"$build/bin/hsdp-data" synth --out-dir data/quickstart

echo
echo "== hsdp-train: input/quickstart.ini on 4 ranks (2 emulated nodes x 2), metrics in runs/quickstart/"
"${mpirun[@]}" "$build/bin/hsdp-train" --config input/quickstart.ini --topology.ranks_per_node=2 \
  --checkpoint.resume=none --checkpoint.overwrite=true --log.overwrite=true  # it starts over each time; copies resume

echo
echo "== hsdp-ckpt: the final checkpoint, written collectively by the 4 ranks"
"$build/bin/hsdp-ckpt" inspect runs/quickstart/checkpoints/step_300.h5 --summary
"$build/bin/hsdp-ckpt" verify runs/quickstart/checkpoints/step_300.h5

echo
echo "== hsdp-sample: 32 tokens the trained model writes after the ids 1,2,3 (greedy; the source's ids are not text)"
"$build/bin/hsdp-sample" runs/quickstart/checkpoints --prompt-ids 1,2,3 --max-new-tokens 32 --temperature 0 --output ids

echo
echo "== text: hsdp's own docs (and Debian's license texts, where present) as bytes, 1,000 steps on 4 ranks (input/own_text.ini)"
mkdir -p data/text
corpus=(README.md docs/*.md)
[[ -d /usr/share/common-licenses ]] && corpus+=(/usr/share/common-licenses/*)
cat "${corpus[@]}" >data/text/corpus.txt
"$build/bin/hsdp-data" encode --input data/text/corpus.txt --output data/text/train.bin \
  --val-output data/text/val.bin --val-fraction 0.05
"${mpirun[@]}" "$build/bin/hsdp-train" --config input/own_text.ini --topology.ranks_per_node=2 \
  --checkpoint.resume=none --checkpoint.overwrite=true

echo
echo "== hsdp-sample: 300 bytes the text model writes after a prompt (temperature 0.8, top-k 40)"
"$build/bin/hsdp-sample" runs/text/checkpoints --prompt "This program is free software" --max-new-tokens 300 \
  --temperature 0.8 --top-k 40 --seed 7

cat <<NEXT

== what next
  $build/bin/hsdp-train --help                      every deck key, its default, the exit codes
  $build/bin/hsdp-plan --config input/quickstart.ini --nodes 2 --ranks-per-node 4
                                                   which strategy fits and is fastest on your cluster
  cp input/quickstart.ini my.ini                    then set [log] dir and [checkpoint] dir in it to your own, and
  mpirun -np 4 $build/bin/hsdp-train --config my.ini
                                                   your own run (it resumes from its checkpoints when run again)
  $build/bin/hsdp-selfcheck                         every strategy and ZeRO++ on this node against one rank
  jobscripts/train.sbatch, jobscripts/train_requeue.sbatch
                                                   Slurm jobs; README.md's "On a cluster" and docs/cluster.md
NEXT
