#!/usr/bin/env bash
# `make demo`: provision a throwaway local container as if it were p40-box,
# with the STAND-IN artifacts (tiny files standing in for the CUDA runfile and
# the cuDNN tarball, and an nvidia-smi that answers like a Tesla P40), then
# print what was installed and where. A demo of the playbook, not a real box:
# nothing here can run a GPU job. KEEP=1 leaves the container running.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
cd "$root"

name=verl-pascal-demo
build_test_inputs
start_mirror 127.0.0.1

podman rm -f "$name" >/dev/null 2>&1 || true
if [[ ${KEEP:-0} != 1 ]]; then
  at_exit "podman rm -f $name >/dev/null 2>&1"
fi
podman run -d --name "$name" --network host \
  -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
  -v "$VERL_PASCAL_APT_CACHE:/var/cache/apt/archives" \
  -v "$VERL_PASCAL_BOX_PIP_CACHE:$VERL_PASCAL_BOX_PIP_MOUNT" \
  "$VERL_PASCAL_IMAGE" sleep infinity >/dev/null
podman cp "$VERL_PASCAL_STANDINS/nvidia-smi" "$name:/usr/bin/nvidia-smi"
# The STAND-IN conda makes envs with the container's python3 (a real Miniforge
# brings its own Python and headers).
podman exec "$name" sh -c 'apt-get update -qq && apt-get install -y -qq python3-venv python3-dev >/dev/null'

# The real inventory, with p40-box pointed at the container and the mirror.
mkdir -p "$cache/demo"
{
  echo "---"
  echo "all:"
  echo "  hosts:"
  echo "    p40-box:"
  echo "      ansible_connection: containers.podman.podman"
  echo "      ansible_host: $name"
  echo "      ansible_user: root"
  standin_host_vars | sed 's/^/      /'
} >"$cache/demo/inventory.yml"

inventories=(-i inventory/hosts.yml -i "$cache/demo/inventory.yml")
echo "== ansible-playbook site.yml -l p40-box (into container $name)"
ansible-playbook "${inventories[@]}" site.yml -l p40-box
echo "== What was installed, and where"
ansible-playbook "${inventories[@]}" playbooks/report.yml -l p40-box
if [[ ${KEEP:-0} == 1 ]]; then
  echo "Container $name kept: podman exec -it $name bash -l"
fi
