# shellcheck shell=bash
# Shared by scripts/molecule.sh and scripts/demo.sh: the base image, the
# STAND-IN artifacts, and a local HTTP mirror serving them on loopback.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$root/.venv}
cache=$root/.cache
export PATH=$venv/bin:$PATH
export VERL_PASCAL_STANDINS=${VERL_PASCAL_STANDINS:-$cache/standins}
# Mounted as the containers' apt archive cache; machine-wide, so repeated runs
# (and CI) download each .deb once.
# One per instance name: apt locks its archive directory, so two containers
# running side by side must not share one.
export VERL_PASCAL_APT_CACHE=${VERL_PASCAL_APT_CACHE:-/var/cache/verl-pascal-test/apt/${VERL_PASCAL_INSTANCE:-p40-box}}
mkdir -p "$VERL_PASCAL_APT_CACHE"
# Mounted as the pip cache of the containers' training user (pip_cache_dir in
# the generated host vars). Only that user writes it, and the conda role hands
# it to that user: it is never this machine's own pip cache, which root fills
# (a cache root writes first has directories the training user cannot write).
# One per instance name too: the shared prepare puts root-owned directories in
# it (the fault the conda role must repair), and a scenario in the other lane
# would see its cache change under it.
export VERL_PASCAL_BOX_PIP_CACHE=${VERL_PASCAL_BOX_PIP_CACHE:-/var/cache/verl-pascal-test/box-pip/${VERL_PASCAL_INSTANCE:-p40-box}}
mkdir -p "$VERL_PASCAL_BOX_PIP_CACHE"
VERL_PASCAL_IMAGE=$("$root/scripts/build-base-image.sh" --print)
export VERL_PASCAL_IMAGE
# The fleet scenario's image: a box the default scenario converged and
# verified, kept by its verify (molecule/default/verify.yml) under a tag that
# is a hash of the base image and of everything a converge reads, so a change
# to any of them makes a new one. (Set VERL_PASCAL_CONVERGED_IMAGE to start
# the fleet scenario from another converged box while working on it.)
converge_inputs=(site.yml ansible.cfg inventory roles library module_utils templates verl_pascal scripts/standins molecule/shared)
VERL_PASCAL_CONVERGED_IMAGE=${VERL_PASCAL_CONVERGED_IMAGE:-localhost/verl-pascal-converged:$(cd "$root" &&
  git ls-files -z -co --exclude-standard -- "${converge_inputs[@]}" | python3 -c '
import hashlib, os, sys
digest = hashlib.sha256(sys.argv[1].encode())
for path in sorted(filter(None, sys.stdin.buffer.read().split(b"\0"))):
    data = os.readlink(path) if os.path.islink(path) else open(path, "rb").read()
    digest.update(path + b"\0" + hashlib.sha256(data).digest())
print(digest.hexdigest()[:12])' "$VERL_PASCAL_IMAGE")}
export VERL_PASCAL_CONVERGED_IMAGE

# The offline scenario's image: the base image plus the Debian packages that
# the shared prepare and the cuda_toolkit role install with apt (its container
# has no network; an offline site's boxes get them from the site's apt mirror).
offline_packages="python3-venv python3-dev $(sed -n 's/^cuda_toolkit_host_compiler_packages: *\[\(.*\)\]/\1/p' \
  "$root/roles/cuda_toolkit/vars/Debian-12.yml" | tr -d ',')"
VERL_PASCAL_OFFLINE_IMAGE=localhost/verl-pascal-debian12-offline:$(echo "$VERL_PASCAL_IMAGE $offline_packages" |
  sha256sum | cut -c1-12)
export VERL_PASCAL_OFFLINE_IMAGE

# Ansible reaches the test containers over SSH, as it reaches real boxes: one
# connection per host, kept open by ControlPersist, with pipelining (a task is
# one round trip; the podman connection starts three `podman exec` per task).
# The transport is `podman exec -i CONTAINER sshd -i` (sshd on its stdin), so no
# port is opened and a container without a network (the offline scenario) is
# reached too. The key pair is made here; the public key is mounted as root's
# authorized_keys (.config/molecule/config.yml); the image's host key is pinned.
export VERL_PASCAL_SSH_DIR=$cache/molecule/ssh
ssh_host_alias=verl-pascal-test-box

# Make the key pair (once) and pin the image's host key.
ssh_setup() {
  mkdir -p "$VERL_PASCAL_SSH_DIR"
  chmod 700 "$VERL_PASCAL_SSH_DIR"
  if [[ ! -f $VERL_PASCAL_SSH_DIR/id_ed25519 ]]; then
    ssh-keygen -q -t ed25519 -N '' -C verl-pascal-test -f "$VERL_PASCAL_SSH_DIR/id_ed25519"
  fi
  cp "$VERL_PASCAL_SSH_DIR/id_ed25519.pub" "$VERL_PASCAL_SSH_DIR/authorized_keys"
  echo "$ssh_host_alias $(podman run --rm --network none "$VERL_PASCAL_IMAGE" \
    cat /etc/ssh/ssh_host_ed25519_key.pub | cut -d' ' -f1,2)" >"$VERL_PASCAL_SSH_DIR/known_hosts"
}

# Print the host variables that make Ansible reach container $1 over SSH.
ssh_host_vars() {
  echo "# Generated: reach the container over SSH (sshd -i through podman exec)."
  echo "ansible_connection: ssh"
  echo "ansible_host: $1"
  echo "ansible_user: root"
  echo "ansible_ssh_private_key_file: $VERL_PASCAL_SSH_DIR/id_ed25519"
  echo "ansible_ssh_common_args: >-"
  echo "  -o \"ProxyCommand=podman exec -i %h /usr/sbin/sshd -i\""
  echo "  -o HostKeyAlias=$ssh_host_alias -o StrictHostKeyChecking=yes"
  echo "  -o UserKnownHostsFile=$VERL_PASCAL_SSH_DIR/known_hosts"
  echo "ansible_ssh_pipelining: true"
  echo "# podman exec waits while another container of this machine is committed to an image"
  echo "# (the default scenario keeps its box for the fleet scenario): allow for it."
  echo "ansible_timeout: 300"
}

# build_test_inputs [RELEASE]: build what is missing: the Debian 12 image and
# the stand-in artifacts with every verl release (the scenarios), plus the SSH
# key pair and the offline scenario's image; with RELEASE (make demo), the
# stand-ins with that verl release alone and neither of those.
build_test_inputs() {
  local release=${1:-}
  "$root/scripts/build-base-image.sh"
  if [[ -z $release ]]; then
    ssh_setup
    build_offline_image
  fi
  "$venv/bin/python" -m verl_pascal.standins.build ${release:+--release "$release"} "$VERL_PASCAL_STANDINS"
}

# Build (or reuse) VERL_PASCAL_OFFLINE_IMAGE from the base image, with the network.
build_offline_image() {
  local ctr=verl-pascal-offline-image-$$
  if podman image exists "$VERL_PASCAL_OFFLINE_IMAGE"; then
    echo "build-offline-image: reusing $VERL_PASCAL_OFFLINE_IMAGE"
    return 0
  fi
  # shellcheck disable=SC2086 # a list of packages
  podman run --name "$ctr" --network host \
    -v /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro \
    -v "$VERL_PASCAL_APT_CACHE:/var/cache/apt/archives" "$VERL_PASCAL_IMAGE" \
    sh -c "apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $offline_packages >/dev/null"
  podman commit --quiet "$ctr" "$VERL_PASCAL_OFFLINE_IMAGE" >/dev/null
  podman rm "$ctr" >/dev/null
  echo "build-offline-image: built $VERL_PASCAL_OFFLINE_IMAGE ($offline_packages)"
}

# Where the containers see VERL_PASCAL_BOX_PIP_CACHE (Molecule's platforms too).
export VERL_PASCAL_BOX_PIP_MOUNT=/var/cache/verl-pascal-test/pip

# Run each command given to at_exit when the calling script exits, last first.
exit_commands=()
run_exit_commands() {
  local command
  for command in "${exit_commands[@]}"; do eval "$command" || true; done
}
at_exit() {
  exit_commands=("$*" "${exit_commands[@]}")
  trap run_exit_commands EXIT
}

# Serve the stand-ins on a free port of ADDRESS (loopback unless given) until
# the calling script exits; sets mirror_url.
start_mirror() {
  local address=${1:-127.0.0.1} port pid
  port=$(python3 -c 'import socket, sys; s=socket.socket(); s.bind((sys.argv[1], 0)); print(s.getsockname()[1])' "$address")
  python3 -m http.server --bind "$address" --directory "$VERL_PASCAL_STANDINS/mirror" "$port" \
    >"$cache/mirror-$port.log" 2>&1 &
  pid=$!
  at_exit "kill $pid 2>/dev/null"
  mirror_url=http://$address:$port
  for _ in $(seq 50); do
    python3 -c "import urllib.request as u; u.urlopen('$mirror_url/SHA256SUMS')" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "mirror did not start; see $cache/mirror-$port.log" >&2
  return 1
}

# The fleet scenario's network (molecule/fleet): a Podman bridge NAME that
# reaches nothing outside this machine (--internal: its nodes get no route
# out), with this machine's side of the bridge at the subnet's .1, where the
# mirror listens. Removed when the calling script exits. Sets fleet_prefix
# (the subnet's first three octets; the nodes are .10, .11 and .12).
fleet_network() {
  local name=$1 subnet bridge
  podman network exists "$name" && podman network rm -f "$name" >/dev/null
  podman network create --internal "$name" >/dev/null
  at_exit "podman network rm -f $name >/dev/null"
  subnet=$(podman network inspect "$name" --format '{{range .Subnets}}{{.Subnet}}{{end}}')
  bridge=$(podman network inspect "$name" --format '{{.NetworkInterface}}')
  [[ $subnet == *.0/24 && -n $bridge ]] || { echo "fleet network: unexpected subnet '$subnet' or bridge '$bridge'" >&2; return 1; }
  fleet_prefix=${subnet%.0/24}
  # An internal network gets no address on this machine's side: give the
  # bridge its gateway address before the first node starts, for the mirror.
  ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge
  at_exit "ip link del $bridge 2>/dev/null"
  ip addr replace "$fleet_prefix.1/24" dev "$bridge"
  ip link set "$bridge" up
}

# Print the host variables that point a host at the stand-ins on the mirror.
standin_host_vars() {
  echo "# Generated: this host takes the STAND-IN artifacts from the local mirror."
  echo "artifact_mirror_url: $mirror_url"
  echo "pip_cache_dir: $VERL_PASCAL_BOX_PIP_MOUNT  # the training user's pip cache, mounted from this machine"
  echo "# No hub from here: GSM8K-format problems made on the box, no model download."
  echo "launch_gsm8k_source: generate"
  echo "launch_gsm8k_generate_count: 64"
  echo "launch_model_source: none"
  echo "# Preflight's host-memory check judges a model of a million parameters: none is"
  echo "# staged here, and this machine has too little memory for the 0.5B reference job"
  echo "# (the failures scenario checks that refusal)."
  echo "model_parameters: 1000000"
  grep -v -e '^---' -e '^#' "$VERL_PASCAL_STANDINS/standins.yml"
}
