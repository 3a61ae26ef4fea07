#!/usr/bin/env bash
# For bench/rerun.py: what the default scenario has around its box, from
# scripts/lib.sh (the images, the stand-ins, the SSH key pair, the local
# mirror), held up for as long as the bench keeps this script's stdin open.
#   bench/rerun_env.sh INSTANCE HOST_VARS_FILE
# Writes the host variables that reach container INSTANCE over SSH and point
# it at the stand-ins on the mirror into HOST_VARS_FILE, then prints one JSON
# line (the environment the bench starts the container with) and waits for
# its stdin to close; the mirror stops with it.
set -euo pipefail
instance=${1:?usage: bench/rerun_env.sh INSTANCE HOST_VARS_FILE}
host_vars=${2:?usage: bench/rerun_env.sh INSTANCE HOST_VARS_FILE}
export VERL_PASCAL_INSTANCE=$instance
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/../scripts/lib.sh"
cd "$root"

# shellcheck disable=SC2119 # no RELEASE: the stand-ins of every verl release (the upgrade switch)
build_test_inputs >&2
start_mirror 127.0.0.1
{ echo "---"; ssh_host_vars "$instance"; standin_host_vars; } >"$host_vars"

python3 -c 'import json, os, sys; print(json.dumps({k: os.environ[k] for k in sys.argv[1:]}), flush=True)' \
  VERL_PASCAL_IMAGE VERL_PASCAL_CONVERGED_IMAGE VERL_PASCAL_APT_CACHE VERL_PASCAL_BOX_PIP_CACHE \
  VERL_PASCAL_BOX_PIP_MOUNT VERL_PASCAL_SSH_DIR VERL_PASCAL_STANDINS
# Until the bench is done (EOF on stdin).
cat >/dev/null
