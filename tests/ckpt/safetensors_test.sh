#!/usr/bin/env bash
# safetensors export read back by an independent Python reader:
#   llm.c file -> hsdp-ckpt import -> hsdp-ckpt export --format safetensors -> read_safetensors.py compares with
#   the llm.c file. Exit 77 (skipped) with the reason when Python (or, in numpy mode, numpy) is missing.
#   safetensors_test.sh HSDP_CKPT PROBE PYTHON READER stdlib|numpy
set -euo pipefail
tool=$1 probe=$2 python=$3 reader=$4 mode=$5
# numpy mode: the interpreter on PATH may be a private one (pyenv) without numpy, while Debian's python3-numpy
# (installed by tools/setup.sh) belongs to /usr/bin/python3: use the first interpreter that has numpy.
if [[ $mode == numpy ]] && ! "$python" -c "import numpy" >/dev/null 2>&1; then
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c "import numpy" >/dev/null 2>&1; then
      python=$candidate
      break
    fi
  done
fi
if ! command -v "$python" >/dev/null 2>&1; then
  echo "SKIP: no python interpreter ('$python') to read the safetensors file independently"
  exit 77
fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/hsdp_ckpt_st.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$probe" make-llmc "$dir/model.bin"
"$tool" import --format llmc "$dir/model.bin" --output "$dir/step_0.h5" >/dev/null
"$tool" export "$dir/step_0.h5" --format safetensors --output "$dir/model.safetensors" >/dev/null
status=0
"$python" "$reader" "$mode" "$dir/model.safetensors" "$dir/model.bin" || status=$?
exit "$status"
