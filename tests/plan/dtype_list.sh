#!/usr/bin/env bash
# hsdp-plan's --param-dtype and --reduce-dtype accept exactly the dtypes its --help lists (label unit):
#
#   dtype_list.sh HSDP_PLAN
#
# Every listed dtype plans (exit 0); spellings hsdp's parse_dtype knows but the list does not (f32, f16, fp64, int8)
# and a made-up one are exit 2 with an error that repeats the list.
set -euo pipefail
plan=$1
fail() { echo "FAIL: $*" >&2; exit 1; }
for flag in --param-dtype --reduce-dtype; do
  list=$("$plan" --help | grep -e "^ *$flag " | awk '{print $3}')
  [[ $list == *"|"* ]] || fail "$flag: no dtype list in --help ('$list')"
  IFS='|' read -ra listed <<<"$list"
  for dtype in "${listed[@]}"; do
    "$plan" --model gpt2-124m "$flag" "$dtype" >/dev/null || fail "$flag $dtype is listed but refused"
  done
  for dtype in f32 f16 fp64 int8 fp8; do
    [[ " ${listed[*]} " == *" $dtype "* ]] && continue
    code=0
    error=$("$plan" --model gpt2-124m "$flag" "$dtype" 2>&1 >/dev/null) || code=$?
    [[ $code == 2 ]] || fail "$flag $dtype is not listed ($list) but exits $code"
    [[ $error == *"$list"* ]] || fail "$flag $dtype: the error does not repeat the list $list: $error"
  done
  echo "$flag: accepts exactly $list"
done
