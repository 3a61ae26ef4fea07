#!/usr/bin/env bash
# Prepare the controller for `make test` / `make demo`: system packages and
# Podman settings. Idempotent; needs root.
set -euo pipefail

packages=(podman runc debootstrap makeself shellcheck xz-utils python3-venv ca-certificates)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) != 0 ]]; then
    echo "setup-host: missing packages ${missing[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup-host: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# crun fails on setrlimit on these hosts; runc works. No default ulimits.
conf_dir=/etc/containers/containers.conf.d
conf=$conf_dir/50-verl-pascal.conf
want='# Written by verl-pascal scripts/setup-host.sh.
[containers]
default_ulimits = []

[engine]
runtime = "runc"'
if [[ ! -f $conf ]] || [[ "$(cat "$conf")" != "$want" ]]; then
  mkdir -p "$conf_dir"
  printf '%s\n' "$want" >"$conf"
  echo "setup-host: wrote $conf"
fi

runtime=$(podman info --format '{{.Host.OCIRuntime.Name}}')
if [[ $runtime != runc ]]; then
  echo "setup-host: podman uses '$runtime', expected runc; check $conf" >&2
  exit 1
fi
