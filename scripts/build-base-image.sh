#!/usr/bin/env bash
# Build (or reuse) the Debian 12 base image the Molecule scenarios run in.
# No image registry is reachable from CI, so the image comes from Debian's
# archive through debootstrap, then `podman import`.
# The archive URL is read from this machine's apt sources, never written here.
set -euo pipefail

# The tag is a hash of this script, so a changed recipe builds a new image.
image=${VERL_PASCAL_IMAGE:-localhost/verl-pascal-debian12:$(sha256sum "$0" | cut -c1-12)}
suite=bookworm
# A bare box: what a fresh Debian server has (sshd included: Ansible reaches
# the test boxes over SSH, as it reaches real ones; systemd, which the fleet
# scenario boots as PID 1 for the Ray services; iproute2, which Ansible's
# network facts read), plus python3 for Ansible.
include=python3,python3-apt,ca-certificates,sudo,procps,iproute2,xz-utils,tar,gzip,openssh-server,systemd,systemd-sysv

if [[ ${1:-} == --print ]]; then
  echo "$image"
  exit 0
fi
if podman image exists "$image"; then
  echo "build-base-image: reusing $image"
  exit 0
fi

mirror=${DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(grep -rhE '^(URIs:|deb)[[:space:]]' /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null \
    | grep -oE 'https?://[^[:space:]]+/debian/?' | grep -v security | head -n1 || true)
fi
if [[ -z $mirror ]]; then
  echo "build-base-image: no Debian archive found in apt sources; set DEBIAN_MIRROR" >&2
  exit 1
fi

root=$(mktemp -d /var/tmp/verl-pascal-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "build-base-image: debootstrap $suite from $mirror"
debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror" >/dev/null
# Like a freshly installed server: package lists present (check mode of apt
# needs them), no downloaded .deb files.
rm -f "$root"/var/cache/apt/archives/*.deb
# sshd's privilege separation directory (a booted box's init makes it): in the
# image for the containers that run no init, and made at boot by systemd for
# those that do (its /run is a fresh tmpfs).
mkdir -p "$root/run/sshd"
echo 'd /run/sshd 0755 root root -' >"$root/etc/tmpfiles.d/verl-pascal-sshd.conf"
tar -C "$root" -c . | podman import \
  --change 'CMD ["sleep", "infinity"]' \
  --change 'ENV LANG=C.UTF-8' - "$image" >/dev/null
echo "build-base-image: built $image"
