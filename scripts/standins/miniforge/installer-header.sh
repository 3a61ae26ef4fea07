#!/bin/sh
# STAND-IN for the Miniforge3 installer (verl-pascal, CI only). CI cannot reach
# GitHub or conda-forge, so verl-pascal-standins builds this self-extracting
# shell installer: the same flags as the real one (-b batch, -p PREFIX, -u
# update in place), and a payload whose `conda` (scripts/standins/miniforge/conda)
# implements only what verl-pascal's conda role runs, with the container's own
# python3 behind it. It is never used on a real box.
set -eu
umask 022
PREFIX="${HOME:-/root}/miniforge3"
BATCH=0
UPDATE=0
usage() {
  echo "usage: $0 [-b] [-p PREFIX] [-u]   (verl-pascal STAND-IN for Miniforge3)"
}
while getopts "bfhp:suk" opt; do
  case $opt in
    b) BATCH=1 ;;
    p) PREFIX=$OPTARG ;;
    u) UPDATE=1 ;;
    f | s | k) ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
if [ "$BATCH" != 1 ]; then
  echo "ERROR: the STAND-IN installer has no interactive mode (license prompt); run it with -b." >&2
  exit 2
fi
case $PREFIX in
  /*) ;;
  *) PREFIX="$(pwd)/$PREFIX" ;;
esac
if [ -e "$PREFIX" ] && [ "$UPDATE" != 1 ]; then
  echo "ERROR: File or directory already exists: '$PREFIX'" >&2
  echo "If you want to update an existing installation, use the -u option." >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "ERROR: the STAND-IN conda needs the host's python3" >&2; exit 1; }
echo "PREFIX=$PREFIX"
echo "Unpacking payload ..."
mkdir -p "$PREFIX"
line=$(awk '/^__VERL_PASCAL_PAYLOAD_BELOW__$/ { print NR + 1; exit }' "$0")
tail -n +"$line" "$0" | tar -xzf - -C "$PREFIX" --no-same-owner
sed -i "s|@PREFIX@|$PREFIX|g" "$PREFIX/etc/profile.d/conda.sh" "$PREFIX/condabin/conda"
mkdir -p "$PREFIX/envs" "$PREFIX/pkgs" "$PREFIX/conda-meta"
echo "==> $(date -u +%Y-%m-%dT%H:%M:%SZ) installer: $0 $* (STAND-IN) <==" >>"$PREFIX/conda-meta/history"
echo "installation finished."
exit 0
# shellcheck disable=SC2317 # the payload marker; the tar.gz payload follows it
__VERL_PASCAL_PAYLOAD_BELOW__
