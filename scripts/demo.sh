#!/usr/bin/env bash
# `make demo`: provision a throwaway local container as if it were p40-box,
# with the STAND-IN artifacts (tiny files standing in for the CUDA runfile and
# the cuDNN tarball, and an nvidia-smi that answers like a Tesla P40), then
# print what was installed and where. A demo of the playbook, not a real box:
# nothing here can run a GPU job. KEEP=1 leaves the container running.
# The terminal gets one line per stage (scripts/stages.sh), then the report
# and the commands to try next; pip, the image build and Ansible write to
# .cache/demo/demo.log, whose path is printed first and last. A failure
# shows the failed stage, the failed task and its message.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/stages.sh
. "$here/stages.sh"
cd "$here/.."

name=verl-pascal-demo
# Where the launch role puts the launch script (roles/launch/defaults/main.yml).
launch_script=/opt/verl-pascal/bin/verl-ppo
mkdir -p .cache/demo
stage_log=$PWD/.cache/demo/demo.log
: >"$stage_log"
started=$SECONDS
echo "make demo: the details go to $stage_log"
state=running
failed() {
  state=explained
  stage_explain explain
  echo "make demo failed after $((SECONDS - started))s."
  exit 1
}
stage_on_failure=failed
finish() {
  if [[ $state == running ]]; then # stopped where no stage could say why (set -u, a signal)
    echo "make demo stopped after $((SECONDS - started))s, in or after its last stage:"
    stage_explain explain
  elif [[ $state == finished ]]; then
    echo "make demo: done in $((SECONDS - started))s."
  fi
  echo "make demo: the whole log is $stage_log"
}
trap finish EXIT

stage "checking the host: packages and Podman (scripts/setup-host.sh)" scripts/setup-host.sh
stage "building .venv (make venv)" make --no-print-directory venv
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
at_exit finish # lib.sh's exit commands run last first: this one last of all

# The verl release and the training user p40-box gets: the inventory's, with its overrides.
demo_vars() {
  local vars
  vars=$(ansible-inventory -i inventory/hosts.yml --host p40-box |
    python3 -c 'import json, sys; v = json.load(sys.stdin); print(v["verl_version"], v["training_user"])') || return
  read -r release user <<<"$vars"
  echo "p40-box: verl $release, training user $user"
}
stage --here "reading p40-box's verl release from the inventory" demo_vars

stage "preparing the Debian 12 image and the stand-ins for verl $release" build_test_inputs "$release"

if [[ ${KEEP:-0} != 1 ]]; then
  # -t 0: its sleep, PID 1, ignores the SIGTERM that podman would wait 10 s on.
  at_exit "podman rm -f -t 0 $name >/dev/null 2>&1"
fi
start_box() {
  start_mirror 127.0.0.1 &&
    podman rm -f -t 0 "$name" &&
    podman run -d --name "$name" --network host \
      -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
      -v "$VERL_PASCAL_APT_CACHE:/var/cache/apt/archives" \
      -v "$VERL_PASCAL_BOX_PIP_CACHE:$VERL_PASCAL_BOX_PIP_MOUNT" \
      "$VERL_PASCAL_IMAGE" sleep infinity &&
    podman cp "$VERL_PASCAL_STANDINS/nvidia-smi" "$name:/usr/bin/nvidia-smi" &&
    # The STAND-IN conda makes envs with the container's python3 (a real
    # Miniforge brings its own Python and headers).
    podman exec "$name" sh -c 'apt-get update -qq && apt-get install -y -qq python3-venv python3-dev'
}
# --here: the mirror's address (mirror_url) and its exit command stay with this shell.
stage --here "starting the container $name and the artifact mirror" start_box

# The real inventory, with p40-box pointed at the container and the mirror.
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

stage "installing the stack: site.yml on p40-box (the container)" \
  ansible-playbook "${inventories[@]}" site.yml -l p40-box
stage "reading what was installed (playbooks/report.yml)" \
  ansible-playbook "${inventories[@]}" playbooks/report.yml -l p40-box

echo
echo "What was installed, and where:"
mapfile -t report < <(stage_explain report)
((${#report[@]})) || report=("(the report is missing: see the end of the log)")
printf '  %s\n' "${report[@]}"
echo
try="podman exec -it -u $user -w /tmp $name $launch_script"
if [[ ${KEEP:-0} == 1 ]]; then
  echo "Next, in the container (kept; podman rm -f $name removes it):"
else
  echo "Next: KEEP=1 make demo keeps the container (this one is removed), to run in it:"
fi
echo "  $try --dry-run        # the exact command, every override"
echo "  $try --check-config   # does the installed verl accept them?"
echo "  podman exec -it $name bash -l"
echo "On a real box: README.md, \"On a real box\" (preflight.yml, site.yml, report.yml, verify.yml)."
state=finished
