#!/usr/bin/env bash
# hsdp-sample refuses bad input with exit 2 and one line naming the problem, never a crash.
#   bad_input_test.sh HSDP_SAMPLE MODEL_DIR WORK
set -euo pipefail
sample=$1 model=$2 work=$3
source "$(dirname "$0")/expect.sh"
rm -rf "$work" && mkdir -p "$work"
checkpoint=$model/one_rank/step_40.h5
long=$(printf '1%.0s,' $(seq 64))1  # 65 ids: block_size is 64
expect_bad_input "checkpoint '$work/none.h5' does not exist" "$sample" "$work/none.h5" --prompt-ids 1
expect_bad_input "has no 'latest' file" "$sample" "$work" --prompt-ids 1
printf 'not hdf5' >"$work/junk.h5"
expect_bad_input "junk.h5" "$sample" "$work/junk.h5" --prompt-ids 1
expect_bad_input "--prompt-ids holds 65 tokens, more than the model's block_size (64)" "$sample" "$checkpoint" --prompt-ids "$long"
expect_bad_input "more than the model's block_size (64)" "$sample" "$checkpoint" --prompt "$(printf '0%.0s' $(seq 65))"
expect_bad_input "token 64 at position 2 is outside the model's vocabulary [0, 64)" "$sample" "$checkpoint" --prompt-ids 1,2,64
expect_bad_input "--prompt: token 104 at position 0 is outside the model's vocabulary [0, 64)" "$sample" "$checkpoint" --prompt hello
expect_bad_input "--prompt-ids must be token ids separated by commas" "$sample" "$checkpoint" --prompt-ids 1,-2
expect_bad_input "--prompt-ids must be token ids separated by commas" "$sample" "$checkpoint" --prompt-ids 1,x
expect_bad_input "give the prompt once" "$sample" "$checkpoint"
expect_bad_input "give the prompt once" "$sample" "$checkpoint" --prompt 0 --prompt-ids 1
# The prompt's form is checked before the checkpoint is read: with none at that path, the prompt is named.
expect_bad_input "give the prompt once" "$sample" "$work/none.h5" --prompt 0 --prompt-ids 1
expect_bad_input "--prompt-ids must be token ids separated by commas" "$sample" "$work/none.h5" --prompt-ids 1,x
expect_bad_input "--prompt is empty" "$sample" "$checkpoint" --prompt ""
expect_bad_input "--temperature must be a finite number >= 0" "$sample" "$checkpoint" --prompt-ids 1 --temperature -1
expect_bad_input "--top-k must be >= 0" "$sample" "$checkpoint" --prompt-ids 1 --top-k -3
expect_bad_input "--max-new-tokens must be >= 0" "$sample" "$checkpoint" --prompt-ids 1 --max-new-tokens -1
expect_bad_input "--output must be text or ids" "$sample" "$checkpoint" --prompt-ids 1 --output json
expect_bad_input "samples on the CPU only" "$sample" "$checkpoint" --prompt-ids 1 --device cuda
expect_bad_input "unrecognised option '--bogus'" "$sample" "$checkpoint" --prompt-ids 1 --bogus
"$sample" --help | grep -q -- "--no-kv-cache"
"$sample" --version | grep -q "^hsdp-sample "
echo "OK"
