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

# shellcheck disable=SC2119 # no RELEASE: the stand-ins of every verl release
build_test_inputs
[[ ${1-} == --inputs-only ]] && exit 0
start_mirror 127.0.0.1
# The instance name is p40-box unless VERL_PASCAL_INSTANCE names another (to
# run two scenarios side by side).
instance=${VERL_PASCAL_INSTANCE:-p40-box}
{ echo "---"; ssh_host_vars "$instance"; standin_host_vars; } >"$VERL_PASCAL_TEST_HOST_VARS/$instance.yml"

# The fleet scenario (molecule/fleet): its network, a mirror on it, and the
# host vars of its three nodes (NAME GPUS P2P).
if [[ " $* " =~ \ (-s|--scenario-name)\ fleet\  || " $* " == *" --all "* ]]; then
  if ! podman image exists "$VERL_PASCAL_CONVERGED_IMAGE"; then
    echo "molecule.sh: the fleet scenario starts from the box the default scenario converges;" \
      "run the default scenario first (scripts/molecule.sh test -s default keeps it as $VERL_PASCAL_CONVERGED_IMAGE)." >&2
    [[ " $* " == *" --all "* ]] || exit 2
  fi
  export VERL_PASCAL_FLEET_NETWORK=verl-pascal-fleet-$instance
  fleet_network "$VERL_PASCAL_FLEET_NETWORK"
  export VERL_PASCAL_FLEET_PREFIX=$fleet_prefix
  start_mirror "$fleet_prefix.1"
  while read -r node gpus p2p; do
    { echo "---"; ssh_host_vars "$instance-$node"; standin_host_vars
      echo "# The fleet scenario: the node's stand-in GPUs, the cluster's interface, a small object store."
      echo "fleet_test_gpus: $gpus"
      echo "fleet_test_p2p: $p2p"
      echo "fleet_interface: eth0"
      echo "launch_gpus: 1"
      echo "ray_cluster_object_store_mib: 256"
    } >"$VERL_PASCAL_TEST_HOST_VARS/$instance-$node.yml"
  done <<'NODES'
head 1 OK
w1 1 OK
w2 2 NS
NODES
fi

molecule "$@"
