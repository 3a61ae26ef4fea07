#!/usr/bin/env bash
# Run Molecule with what the scenarios need around them (scripts/lib.sh):
#   scripts/molecule.sh test --all        (every scenario, one after the other)
#   scripts/molecule.sh converge -s default
#   scripts/molecule.sh --inputs-only     (build the images and stand-ins, run nothing:
#                                          scripts/test.sh does it once before its lanes)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"

export VERL_PASCAL_TEST_HOST_VARS=$cache/molecule/host_vars
mkdir -p "$VERL_PASCAL_TEST_HOST_VARS"

build_test_inputs
[[ ${1-} == --inputs-only ]] && exit 0
start_mirror
# The instance name is p40-box unless VERL_PASCAL_INSTANCE names another (to
# run two scenarios side by side).
instance=${VERL_PASCAL_INSTANCE:-p40-box}
{ echo "---"; ssh_host_vars "$instance"; standin_host_vars; } >"$VERL_PASCAL_TEST_HOST_VARS/$instance.yml"

molecule "$@"
