#!/usr/bin/env bash
# tools/bench/own_dir.sh, sourced as the benches source it: a new folder is made and marked, an empty one marked as it
# is, one the same program made emptied (the folder itself kept), and a folder of other files, one another program made,
# a file or a link is refused with exit 2 and one line naming it, left as it was.
#
#   own_dir_test.sh OWN_DIR_SH WORK
set -euo pipefail
own_dir_sh=$1 work=$2
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
# own_dir in a subshell (it exits on refusal): EXPECTED_EXIT DIR
try() {
  local code=0
  # shellcheck source=/dev/null # the path is an argument
  (source "$own_dir_sh" && own_dir "$2" --out bench.sh) >"$work/out.txt" 2>&1 || code=$?
  [[ $code == "$1" ]] || { cat "$work/out.txt"; fail "own_dir $2 exited $code, expected $1"; }
}

try 0 "$work/new/deeper"
[[ $(cat "$work/new/deeper/.hsdp-own-dir") == bench.sh ]] || fail "a new folder not marked"
echo result >"$work/new/deeper/result.jsonl"
try 0 "$work/new/deeper"
[[ ! -e $work/new/deeper/result.jsonl && -e $work/new/deeper/.hsdp-own-dir ]] || fail "its own folder not replaced"

mkdir "$work/empty" && chmod 0750 "$work/empty"
try 0 "$work/empty"
[[ $(stat -c %a "$work/empty") == 750 ]] || fail "an empty folder was made again (mode $(stat -c %a "$work/empty"))"
mkdir -p "$work/own/sub" && echo bench.sh >"$work/own/.hsdp-own-dir" && touch "$work/own/sub/old"
chmod 0750 "$work/own"
try 0 "$work/own"
[[ ! -e $work/own/sub && $(stat -c %a "$work/own") == 750 ]] ||
  fail "its own folder: contents left or folder made again"

mkdir -p "$work/theirs/checkpoints" && echo keep >"$work/theirs/checkpoints/step_100.h5"
try 2 "$work/theirs"
grep -qx "bench.sh: --out $work/theirs: a folder that holds files and was not made by bench.sh .*" "$work/out.txt" ||
  fail "message: $(cat "$work/out.txt")"
[[ $(wc -l <"$work/out.txt") == 1 ]] || fail "not one line"
[[ $(cat "$work/theirs/checkpoints/step_100.h5") == keep ]] || fail "a refused folder was changed"

mkdir -p "$work/other" && echo hsdp-selfcheck >"$work/other/.hsdp-own-dir" && touch "$work/other/row.log"
try 2 "$work/other"
[[ -e $work/other/row.log ]] || fail "another program's folder was changed"

echo data >"$work/file"
try 2 "$work/file"
grep -q "exists and is not a folder" "$work/out.txt" || fail "a file: $(cat "$work/out.txt")"
ln -s "$work/new/deeper" "$work/link"
try 2 "$work/link"
[[ -e $work/new/deeper/.hsdp-own-dir ]] || fail "a link's folder was changed"
echo "own_dir: new, empty and its own folders made; others, files and links refused and kept"
