# shellcheck shell=bash
# Sourced by a bench that writes into a folder of its own (--out, --work): `own_dir DIR OPTION PROGRAM` makes DIR, or
# takes it where it is empty (kept as it is: its mode, ACLs, a parallel file system's striping) or an earlier run of
# PROGRAM made it (DIR/.hsdp-own-dir names PROGRAM, as hsdp-selfcheck's --work folder names it; its contents are
# deleted). Any other folder, or a file or link there, ends the bench with exit 2 and one line naming it, and is left
# as it was: a mistyped --out never deletes someone's runs or checkpoints.
own_dir() { # DIR OPTION PROGRAM
  local dir=$1 option=$2 program=$3
  if [[ -L $dir || (-e $dir && ! -d $dir) ]]; then
    echo "$program: $option $dir: exists and is not a folder" >&2
    exit 2
  fi
  if [[ -d $dir && -n $(ls -A -- "$dir") ]]; then
    if [[ $(cat -- "$dir/.hsdp-own-dir" 2>/dev/null) != "$program" ]]; then
      echo "$program: $option $dir: a folder that holds files and was not made by $program (no .hsdp-own-dir" \
        "naming it): it is not replaced; give a new or empty folder" >&2
      exit 2
    fi
    find "$dir" -mindepth 1 -delete
  fi
  mkdir -p -- "$dir"
  echo "$program" >"$dir/.hsdp-own-dir"
}
