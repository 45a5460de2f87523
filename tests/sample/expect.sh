# Sourced by the sample tests: expect_bad_input TEXT COMMAND... runs COMMAND and requires exit code 2, nothing on
# stdout, and exactly one line on stderr that contains TEXT.
expect_bad_input() {
  local text=$1
  shift
  local status=0
  "$@" >"$work/stdout" 2>"$work/stderr" || status=$?
  local lines
  lines=$(wc -l <"$work/stderr")
  if [[ $status -ne 2 || $lines -ne 1 || -s $work/stdout ]] || ! grep -qF -- "$text" "$work/stderr"; then
    echo "FAIL: $* gave exit $status, $lines stderr line(s), expected exit 2 and one line with '$text':"
    cat "$work/stderr" "$work/stdout"
    exit 1
  fi
  echo "exit 2: $(cat "$work/stderr")"
}

# The first python interpreter that has numpy (Debian's python3-numpy belongs to /usr/bin/python3, while the one on
# PATH may be a private one without it); exit 77 (skipped) with the reason when there is none.
python_with_numpy() {
  local candidate
  for candidate in "$1" /usr/bin/python3 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import numpy" >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  echo "SKIP: no python interpreter with numpy for the independent reference" >&2
  exit 77
}
