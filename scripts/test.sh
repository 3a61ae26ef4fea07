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
# (balanced by their measured times: docs/benchmarks.md, "The test command").
# Each stage's output goes to its lane's log, .cache/test/<lane>.log (setup,
# venv and lint to main's); the terminal gets one line per stage and its time
# (scripts/stages.sh), each prefixed with its lane, with pytest's summary line
# and Molecule's action lines and scenario recap. A failed lane does not stop
# the other, and the run fails if either did. At the end, also after a
# failure: for each failed stage what its log says (pytest's failures, the
# lines before Molecule's failed action, or the end of its output: CI keeps
# only the terminal), the time of each stage, and last, so that even the few
# lines CI keeps say it, each failed task and its message.
#   scripts/test.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
# shellcheck source=scripts/stages.sh
. scripts/stages.sh

logs=$PWD/.cache/test
mkdir -p "$logs"
: >"$logs/main.log"
: >"$logs/upgrade.log"
times=$(mktemp)
failures=$(mktemp) # LANE, the stage's first and last line in its log, the stage
started=$SECONDS
echo "make test: each stage's output goes to $logs/main.log or $logs/upgrade.log"
# pytest's summary line; Molecule's actions as they end, and its scenario recap.
stage_keep='^=+ .* in [0-9.]+s( \([0-9:]+\))? =+$|^INFO +.*: Executed: |^[a-z-]+ +: actions=[0-9]+ '

report() {
  local lane from to name
  while IFS=$'\t' read -r lane from to name; do
    echo "== why the $lane lane's $name failed (its log: $logs/$lane.log, lines $from to $to)"
    stage_log=$logs/$lane.log stage_from=$from stage_to=$to
    stage_explain explain | cut -c1-400
  done <"$failures"
  echo "== stage times"
  cat "$times"
  printf '%-8s %-18s %6ds\n' all total $((SECONDS - started))
  while IFS=$'\t' read -r lane from to name; do
    echo "== the $lane lane's $name failed"
    stage_log=$logs/$lane.log stage_from=$from stage_to=$to
    stage_explain reason | cut -c1-900
  done <"$failures"
  echo "make test: the logs are $logs/main.log and $logs/upgrade.log"
  rm -f "$times" "$failures"
}
trap report EXIT

# step LANE NAME COMMAND...: one stage of LANE, its output into LANE's log;
# records how long it took and how it ended.
step() {
  local lane=$1 name=$2 start=$SECONDS rc state=ok
  shift 2
  stage_log=$logs/$lane.log
  stage "$name" "$@"
  rc=$?
  if ((rc != 0)); then
    state="failed ($rc)"
    printf '%s\t%s\t%s\t%s\n' "$lane" "$stage_from" "$stage_to" "$name" >>"$failures"
  fi
  printf '%-8s %-18s %6ds  %s\n' "$lane" "$name" $((SECONDS - start)) "$state" >>"$times"
  return "$rc"
}

for stage in setup venv lint; do
  step main "$stage" make --no-print-directory "$stage" | sed -u 's/^/[main] /'
  ((PIPESTATUS[0] == 0)) || exit
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

{ upgrade_lane 2>&1 | sed -u 's/^/[upgrade] /'; exit "${PIPESTATUS[0]}"; } &
upgrade_pid=$!
{ main_lane 2>&1 | sed -u 's/^/[main] /'; exit "${PIPESTATUS[0]}"; } &
main_pid=$!
wait "$upgrade_pid"
upgrade_rc=$?
wait "$main_pid"
main_rc=$?
rm -f "$inputs_done"
((upgrade_rc == 0 && main_rc == 0))
