#!/usr/bin/env bash
# `make test`, what CI runs: setup, venv and lint in order, then two lanes
# side by side, each with its own Podman container (VERL_PASCAL_INSTANCE), so
# that one waits on pip, apt or a container while the other computes:
#   upgrade: the Molecule inputs (images, stand-ins), the upgrade scenario (the
#            longest: ten runs of site.yml), the offline scenario, then the
#            failures scenario
#   main:    the unit tests (while the inputs are built), then, once the inputs
#            are there, the default scenario and the fleet scenario, which
#            starts from the box the default scenario converged
# (balanced by their measured times: on 2026-12-05, from a fresh clone, after
# 114 s of setup, venv and lint, the upgrade lane took 2039 s and the main
# lane 2177 s with failures, 99 s, in it; the run 2291 s in all).
# Every line a lane prints is prefixed with its name. The time of each stage
# and scenario is printed at the end, also after a failure; a failed lane
# does not stop the other, and the run fails if either did.
#   scripts/test.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

times=$(mktemp)
logs=$(mktemp -d)
started=$SECONDS
# For a failed lane, what led to its first failed Molecule action, with the
# colours taken out: CI keeps only the end of the output, so the reason is
# printed again here, before the stage times.
why_failed() { # LANE
  local log=$logs/$1.log at
  [[ -f $log ]] || return 0
  at=$(grep -a -n -m1 'Executed: Failed' "$log" | cut -d: -f1)
  [[ -n $at ]] || return 0
  echo "== why the $1 lane failed: the 80 lines before its first failed Molecule action"
  head -n "$at" "$log" | tail -n 80 | sed -E 's/\x1b\[[0-9;]*m//g' | cut -c1-400
}
# For a failed lane, its failed task and that task's message, joined from the
# lines Molecule wrapped and cut to 900 characters: printed last, so that even
# the few lines of the output CI keeps say what failed and why.
reason() { # LANE
  local log=$logs/$1.log at from task
  [[ -f $log ]] || return 0
  at=$(grep -a -n -m1 'Executed: Failed' "$log" | cut -d: -f1)
  [[ -n $at ]] || return 0
  from=$(head -n "$at" "$log" | grep -a -n -E '(fatal|failed): \[' | tail -n 1 | cut -d: -f1)
  [[ -n $from ]] || return 0
  task=$(head -n "$from" "$log" | grep -a 'TASK \[' | tail -n 1 | sed -E 's/\x1b\[[0-9;]*m//g; s/^.*TASK \[//; s/\] *\**$//')
  echo "== the $1 lane's failed task: $task"
  tail -n +"$from" "$log" | head -n $((at - from)) | sed -E 's/\x1b\[[0-9;]*m//g; s/^\[[a-z]+\] +│ ?//' |
    awk 'NR > 1 && NF == 0 { exit } { sub(/^ +/, ""); printf "%s ", $0 }' |
    sed -E 's/^.*"msg": //' | cut -c1-900
  echo
}
report() {
  why_failed upgrade
  why_failed main
  echo "== stage times"
  cat "$times"
  printf '%-8s %-18s %6ds\n' all total $((SECONDS - started))
  reason upgrade
  reason main
  rm -rf "$times" "$logs"
}
trap report EXIT

# step LANE NAME COMMAND...: run it, record how long it took and how it ended.
step() {
  local lane=$1 name=$2 start=$SECONDS rc state=ok
  shift 2
  "$@"
  rc=$?
  ((rc == 0)) || state="failed ($rc)"
  printf '%-8s %-18s %6ds  %s\n' "$lane" "$name" $((SECONDS - start)) "$state" >>"$times"
  return "$rc"
}

for stage in setup venv lint; do
  step main "$stage" make --no-print-directory "$stage" || exit
done

scenario() { # LANE SCENARIO: its own container name, so that lanes never meet
  step "$1" "molecule $2" env VERL_PASCAL_INSTANCE="p40-box-$1" scripts/molecule.sh test -s "$2"
}
# The inputs are built once, in the upgrade lane; the main lane waits for them
# after its unit tests (the file says how the build ended).
inputs_done=$(mktemp -u)
inputs() {
  local rc=0
  step upgrade inputs scripts/molecule.sh --inputs-only || rc=$?
  echo "$rc" >"$inputs_done"
  return "$rc"
}
wait_for_inputs() {
  local waited=$SECONDS
  until [[ -f $inputs_done ]]; do sleep 5; done
  echo "waited $((SECONDS - waited))s for the Molecule inputs"
  [[ $(cat "$inputs_done") == 0 ]]
}
upgrade_lane() {
  inputs && scenario upgrade upgrade && scenario upgrade offline && scenario upgrade failures
}
main_lane() {
  step main unit make --no-print-directory unit
  local rc=$?
  wait_for_inputs || return
  ((rc == 0)) && scenario main default && scenario main fleet
}

{ upgrade_lane 2>&1 | sed -u 's/^/[upgrade] /' | tee "$logs/upgrade.log"; exit "${PIPESTATUS[0]}"; } &
upgrade_pid=$!
{ main_lane 2>&1 | sed -u 's/^/[main] /' | tee "$logs/main.log"; exit "${PIPESTATUS[0]}"; } &
main_pid=$!
wait "$upgrade_pid"
upgrade_rc=$?
wait "$main_pid"
main_rc=$?
rm -f "$inputs_done"
((upgrade_rc == 0 && main_rc == 0))
