#!/usr/bin/env bash
# Run Molecule with what the scenarios need around them (scripts/lib.sh):
#   scripts/molecule.sh test --all        (what `make test` runs)
#   scripts/molecule.sh converge -s default
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"

export VERL_PASCAL_TEST_HOST_VARS=$cache/molecule/host_vars
mkdir -p "$VERL_PASCAL_TEST_HOST_VARS"

build_test_inputs
start_mirror
# The instance name is p40-box unless VERL_PASCAL_INSTANCE names another (to
# run two scenarios side by side).
{ echo "---"; standin_host_vars; } >"$VERL_PASCAL_TEST_HOST_VARS/${VERL_PASCAL_INSTANCE:-p40-box}.yml"

molecule "$@"
