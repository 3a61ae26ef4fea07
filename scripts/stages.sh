# shellcheck shell=bash
# One line per stage on the terminal, and all that a stage prints into a log
# file (scripts/demo.sh, scripts/test.sh):
#   stage_log=FILE                  the log (appended to)
#   stage TITLE COMMAND [ARG...]    run COMMAND as one stage; its status is COMMAND's
# prints "[ 12s] TITLE ... ok" (the time the stage took) or "... failed (RC)",
# on a terminal with the title shown while it runs. COMMAND runs in a subshell
# with `set -e`, so that a shell function stops at its first failed command,
# and cannot set the caller's variables; `stage --here` runs it in the calling
# shell instead, for one that must (with `set -e` off: it chains its commands).
# Bash ignores `set -e` in every function and subshell run where it is
# ignored (a condition, a command before `||` or `&&`): call a stage that runs
# a shell function as a plain command, and set stage_on_failure to a command
# that handles a failure (scripts/demo.sh: explain it and exit).
# stage_keep, an extended regex, also shows the lines of the output that match
# it (test.sh: pytest's and Molecule's summaries), without colours.
# stage_from and stage_to are the stage's first and last lines in the log, for
# stage_explain.

stage_log=/dev/null
stage_keep=
stage_on_failure=
stage_from=1
stage_to= # empty while a stage runs: to the end of the log
stage_python=${VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv}/bin/python

# stage_line SECONDS TITLE STATE: the line that says how a stage went.
stage_line() {
  printf '[%3ds] %s ... %s\n' "$1" "$2" "$3"
}

stage() {
  local here=0 title start=$SECONDS rc=0 errexit=0 state=ok
  [[ $1 == --here ]] && { here=1; shift; }
  title=$1
  shift
  [[ -e $stage_log ]] || : >"$stage_log"
  stage_from=$(($(wc -l <"$stage_log") + 1)) stage_to=
  printf '== %s: %s\n' "$title" "$*" >>"$stage_log"
  [[ $- == *e* ]] && errexit=1
  set +e
  if ((here)); then
    "$@" >>"$stage_log" 2>&1
    rc=$?
  elif [[ -n $stage_keep ]]; then
    (set -e; "$@") 2>&1 | tee -a "$stage_log" | sed -u -E 's/\x1b\[[0-9;]*[A-Za-z]//g' |
      grep --line-buffered -E -- "$stage_keep"
    rc=${PIPESTATUS[0]}
  else
    [[ -t 1 ]] && printf '[ ...] %s ... ' "$title"
    (set -e; "$@") >>"$stage_log" 2>&1
    rc=$?
    [[ -t 1 ]] && printf '\r'
  fi
  ((errexit)) && set -e
  stage_to=$(wc -l <"$stage_log")
  ((rc == 0)) || state="failed ($rc)"
  stage_line $((SECONDS - start)) "$title" "$state" | tee -a "$stage_log"
  if ((rc != 0)) && [[ -n $stage_on_failure ]]; then
    $stage_on_failure
  fi
  return "$rc"
}

# stage_explain [explain|reason|report]: what the log says of the last stage
# (verl_pascal.stagelog). explain, of a failure: the failed Ansible task and
# its message, pytest's failures, the lines before Molecule's failed action,
# or else the end of its output (also without the venv's Python, which a
# stage may lack); reason: the failed task and message, or the failed tests;
# report: what the playbook's debug tasks printed.
stage_explain() {
  local how=${1:-explain}
  if [[ -x $stage_python ]] &&
    "$stage_python" -m verl_pascal.stagelog "$how" "$stage_log" --from "$stage_from" ${stage_to:+--to "$stage_to"} 2>/dev/null; then
    return 0
  fi
  [[ $how == explain ]] || return 0
  echo "(the last 40 lines of its output)"
  sed -n "${stage_from},${stage_to:-\$}p" "$stage_log" | tail -n 40
}
