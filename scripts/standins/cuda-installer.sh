#!/usr/bin/env bash
# STAND-IN for NVIDIA's CUDA 11.8 runfile installer (cuda-installer), packed by
# verl-pascal-standins into a makeself archive. CI cannot download the real
# 4.3 GB runfile, so this script honours the same flags and writes the same
# layout, with tiny files. It is never used on a real box.
set -euo pipefail
umask 022 # makeself runs its payload under umask 077

VERSION=11.8
BUILD=11.8.89
LOG=/var/log/cuda-installer.log
here=$(cd "$(dirname "$0")" && pwd)

log() { printf '[%s] %s\n' "$1" "$2" >>"$LOG"; }
die() {
  log ERROR "$1"
  echo "$1" >&2
  exit 1
}

silent=0 toolkit=0 override=0 manpage=1 prefix=/usr/local/cuda-$VERSION tmpdir=${TMPDIR:-/tmp}
mkdir -p "$(dirname "$LOG")"
log INFO "Stand-in installer started with: $*"
for arg in "$@"; do
  case $arg in
    --silent) silent=1 ;;
    --toolkit) toolkit=1 ;;
    --toolkitpath=* | --installpath=*) prefix=${arg#*=} ;;
    --tmpdir=*) tmpdir=${arg#*=} ;;
    --override) override=1 ;;
    --no-man-page) manpage=0 ;;
    --driver) die "This stand-in installs the toolkit only; verl-pascal never installs a driver." ;;
    *) die "Unknown option: $arg" ;;
  esac
done

# The real installer opens an interactive text UI without --silent, which an
# unattended run cannot answer.
((silent)) || die "Interactive mode needs a terminal; run with --silent for an unattended install."
((toolkit)) || die "Nothing to install: pass --toolkit."
[[ $prefix == /* ]] || die "Install path must be absolute: $prefix"
[[ -d $tmpdir ]] || die "Temporary directory $tmpdir does not exist."

# The real installer refuses host compilers it does not support unless --override.
if ((!override)); then
  major=$(gcc -dumpversion 2>/dev/null | cut -d. -f1 || true)
  if [[ -z $major ]] || ((major > 11)); then
    die "Failed to verify gcc version. See log at $LOG for details."
  fi
fi

log INFO "Installing: CUDA Toolkit into $prefix"
target=$prefix/targets/x86_64-linux
mkdir -p "$prefix/bin" "$target/lib" "$target/include" "$prefix/nvvm"
cp "$here/payload/nvcc" "$prefix/bin/nvcc"
cp "$here/payload/cuda-uninstaller" "$prefix/bin/cuda-uninstaller"
cp "$here/payload/version.json" "$prefix/version.json"
# STAND-IN test hook (molecule/shared/interrupt.py): when the pause file names
# this installer, stop here, half done (version.json written, the libraries
# not), until the test cuts the run off.
if [ "$(cat /var/tmp/verl-pascal-standin-pause 2>/dev/null)" = cuda ]; then
  echo cuda >/var/tmp/verl-pascal-standin-paused
  sleep 600
fi
cp "$here/payload/cuda_runtime_api.h" "$target/include/cuda_runtime_api.h"
cp "$here/payload/libcudart.so.$BUILD" "$target/lib/libcudart.so.$BUILD"
ln -sfn "libcudart.so.$BUILD" "$target/lib/libcudart.so.11.0"
ln -sfn libcudart.so.11.0 "$target/lib/libcudart.so"
ln -sfn targets/x86_64-linux/lib "$prefix/lib64"
ln -sfn targets/x86_64-linux/include "$prefix/include"
chmod 0755 "$prefix/bin/nvcc" "$prefix/bin/cuda-uninstaller"
if ((manpage)); then
  mkdir -p "$prefix/share/man/man1"
  echo '.TH NVCC 1' >"$prefix/share/man/man1/nvcc.1"
fi
log INFO "Installed: CUDA Toolkit $VERSION (stand-in) into $prefix"
echo "==========="
echo "= Summary ="
echo "==========="
echo "Toolkit:  Installed in $prefix/"
