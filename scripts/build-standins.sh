#!/usr/bin/env bash
# Build the STAND-IN artifacts for what CI cannot download:
# a CUDA 11.8 runfile (a real makeself archive honouring the real installer's
# flags) and a cuDNN 8.9.7 tarball with the real name and layout, a Miniforge
# installer whose conda runs on the container's python3, an apex source archive
# with tiny real C extensions, the real torch CPU wheel (from the pip find-links
# folder) with its dependencies as a PEP 503 index, plus a stand-in nvidia-smi
# answering like a Tesla P40. Output, in OUT (default .cache/standins):
#   mirror/<artifact file names>, mirror/simple/ (PEP 503), mirror/SHA256SUMS, mirror/manifest.json,
#   mirror/find-links.html, and the REAL verl sdists of the lock with the files of
#   their dependency locks for the stand-in Python and torch (verl-pascal-prefetch)
#   nvidia-smi
#   torch-locks/   the hashed torch lock for the stand-in torch (the pytorch role reads it)
#   standins.yml   the lock entries (sha256, size) that point at the stand-ins
# Rebuilt only when the sources change. Real boxes never see these files.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$here/standins
out=${1:-$(cd "$here/.." && pwd)/.cache/standins}
cuda_name=cuda_11.8.0_520.61.05_linux.run
cudnn_top=cudnn-linux-x86_64-8.9.7.29_cuda11-archive
miniforge_name=Miniforge3-26.3.2-3-Linux-x86_64.sh
apex_top=apex-24.04.01

# The torch wheel in the pip find-links folder (VERL_PASCAL_WHEELS_DIR, default:
# what `pip config get global.find-links` prints) is part of the input.
wheels=${VERL_PASCAL_WHEELS_DIR:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}
repo=$(cd "$here/.." && pwd)
# The verl part also depends on the lock, the dependency locks and the prefetch code.
stamp=$( (cat "$0"; find "$src" -type f -print0 | sort -z | xargs -0 cat; ls -l "$wheels"/torch-*.whl 2>/dev/null || true
  cat "$repo/inventory/group_vars/all/versions.yml"
  find "$repo/verl_pascal/releases" "$repo/roles/conda/files" "$repo/verl_pascal/prefetch" "$repo/module_utils" \
    -type f -name '*.txt' -o -type f -name '*.py' |
    sort | xargs cat) | sha256sum | cut -d' ' -f1)
if [[ -f $out/.stamp && $(cat "$out/.stamp") == "$stamp" ]]; then
  echo "build-standins: up to date in $out"
  exit 0
fi
for tool in makeself gcc tar xz sha256sum; do
  command -v "$tool" >/dev/null || { echo "build-standins: $tool is missing (run scripts/setup-host.sh)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out/mirror"

# A real shared library with the real soname, so ldconfig treats it as such.
shlib() { # soname output symbol
  printf 'int %s(void) { return 0; }\n' "$3" >"$work/$3.c"
  gcc -shared -fPIC -Wl,-soname,"$1" -o "$2" "$work/$3.c"
}

# --- CUDA runfile ------------------------------------------------------------
pkg=$work/cuda
mkdir -p "$pkg/payload"
cp "$src/cuda-installer.sh" "$pkg/cuda-installer"
cp "$src/nvcc" "$src/cuda-uninstaller" "$src/version.json" "$pkg/payload/"
printf '#pragma once\n#define CUDART_VERSION 11080\n' >"$pkg/payload/cuda_runtime_api.h"
shlib libcudart.so.11.0 "$pkg/payload/libcudart.so.11.8.89" cudaRuntimeGetVersion
# NVIDIA's makeself header hands unknown flags (--silent, --toolkit, ...) to
# the installer; Debian's stock header rejects them, so patch a copy.
header=$work/makeself-header.sh
python3 - /usr/share/makeself/makeself-header.sh "$header" <<'PY'
import sys
text = open(sys.argv[1]).read()
old = '    -*)\n\techo Unrecognized flag : "\\$1" >&2\n\tMS_Help\n\texit 1\n\t;;\n'
if old not in text:
    sys.exit("makeself header layout changed: cannot pass installer flags through")
open(sys.argv[2], "w").write(text.replace(old, '    -*)\n\tbreak ;;\n'))
PY
makeself --quiet --xz --header "$header" "$pkg" "$out/mirror/$cuda_name" \
  "CUDA Toolkit 11.8 installer (verl-pascal STAND-IN)" ./cuda-installer >/dev/null

# --- cuDNN tarball -----------------------------------------------------------
top=$work/$cudnn_top
mkdir -p "$top/include" "$top/lib"
cat >"$top/include/cudnn_version.h" <<'H'
/* verl-pascal STAND-IN: same macros as cuDNN 8.9.7's header. */
#ifndef CUDNN_VERSION_H_
#define CUDNN_VERSION_H_

#define CUDNN_MAJOR 8
#define CUDNN_MINOR 9
#define CUDNN_PATCHLEVEL 7

#define CUDNN_VERSION (CUDNN_MAJOR * 1000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

#endif /* CUDNN_VERSION_H */
H
for h in cudnn cudnn_ops_infer cudnn_ops_train cudnn_adv_infer cudnn_cnn_infer; do
  printf '/* verl-pascal STAND-IN */\n#include "cudnn_version.h"\n' >"$top/include/$h.h"
  cp "$top/include/$h.h" "$top/include/${h}_v8.h"
done
for lib in libcudnn libcudnn_ops_infer libcudnn_ops_train libcudnn_cnn_infer libcudnn_adv_infer; do
  shlib "$lib.so.8" "$top/lib/$lib.so.8.9.7" "${lib}_version"
  ln -s "$lib.so.8.9.7" "$top/lib/$lib.so.8"
  ln -s "$lib.so.8" "$top/lib/$lib.so"
done
echo "verl-pascal STAND-IN for the cuDNN license text." >"$top/LICENSE"
tar -C "$work" --owner=0 --group=0 -cJf "$out/mirror/$cudnn_top.tar.xz" "$cudnn_top"

# --- Miniforge installer (STAND-IN) ------------------------------------------
# A self-extracting shell installer like the real one (-b -p PREFIX, -u); its
# conda runs on the container's python3 (scripts/standins/miniforge/conda).
mf=$work/miniforge
mkdir -p "$mf/bin" "$mf/condabin" "$mf/etc/profile.d"
install -m 0755 "$src/miniforge/conda" "$mf/bin/conda"
install -m 0755 "$src/miniforge/condabin-conda" "$mf/condabin/conda"
install -m 0644 "$src/miniforge/conda.sh" "$mf/etc/profile.d/conda.sh"
{ cat "$src/miniforge/installer-header.sh"; tar -C "$mf" --owner=0 --group=0 -czf - .; } >"$out/mirror/$miniforge_name"
chmod 0755 "$out/mirror/$miniforge_name"

# --- apex source archive (STAND-IN) -----------------------------------------
# Compiles two tiny real C extensions, honours both flag styles, records the
# arch list and job count it was built with (scripts/standins/apex/setup.py).
mkdir -p "$work/$apex_top"
cp -r "$src/apex/." "$work/$apex_top/"
tar -C "$work" --owner=0 --group=0 --mtime=@0 --sort=name -czf "$out/mirror/$apex_top.tar.gz" "$apex_top"

# --- torch and its dependencies as a PEP 503 index (mirror/simple/) -----------
# The real torch CPU wheel from the find-links folder stands in for the cu118
# build; its dependencies and the env's build tools (the conda role's hashed
# lock, checked by pip as it downloads) are fetched once with pip download into
# a cache that outlives rebuilds, then hard-linked here.
torch_whl=$(find "$wheels" -maxdepth 1 -name 'torch-*-cp311-*.whl' 2>/dev/null | sort | tail -n 1)
if [[ -z $torch_whl ]]; then
  echo "build-standins: no torch wheel for Python 3.11 in '$wheels'; set VERL_PASCAL_WHEELS_DIR" >&2
  exit 1
fi
torch_standin_version=$(basename "$torch_whl" | cut -d- -f2)
downloads=${VERL_PASCAL_PIP_DOWNLOADS:-$(dirname "$out")/pip-downloads}
build_lock=$repo/roles/conda/files/build-requirements.txt
wanted="torch==$torch_standin_version $(sha256sum "$build_lock" | cut -d' ' -f1)"
if [[ ! -f $downloads/.requirements || $(cat "$downloads/.requirements") != "$wanted" ]]; then
  mkdir -p "$downloads"
  python3 -m pip download --quiet --only-binary=:all: --find-links "$wheels" --dest "$downloads" "torch==$torch_standin_version"
  python3 -m pip download --quiet --no-deps --require-hashes --dest "$downloads" -r "$build_lock"
  echo "$wanted" >"$downloads/.requirements"
fi
python3 - "$downloads" "$out/mirror/simple" <<'PY'
import hashlib, html, os, re, shutil, sys, urllib.parse
src, simple = sys.argv[1:]
projects = {}
for name in sorted(os.listdir(src)):
    if not name.endswith((".whl", ".tar.gz")):
        continue
    project = re.sub(r"[-_.]+", "-", name.split("-")[0]).lower()
    os.makedirs(os.path.join(simple, project), exist_ok=True)
    dest = os.path.join(simple, project, name)
    try:
        os.link(os.path.join(src, name), dest)
    except OSError:
        shutil.copyfile(os.path.join(src, name), dest)
    digest = hashlib.sha256(open(dest, "rb").read()).hexdigest()
    projects.setdefault(project, []).append((name, digest))
for project, files in projects.items():
    links = "".join(f'<a href="{urllib.parse.quote(n)}#sha256={d}">{html.escape(n)}</a><br>\n' for n, d in files)
    with open(os.path.join(simple, project, "index.html"), "w") as f:
        f.write(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
with open(os.path.join(simple, "index.html"), "w") as f:
    f.write("<!DOCTYPE html>\n<html><body>\n")
    f.write("".join(f'<a href="{p}/">{p}</a><br>\n' for p in sorted(projects)))
    f.write("</body></html>\n")
PY

# --- the hashed torch lock for the stand-in torch (the pytorch role's format) --
# Resolved by pip from mirror/simple/ alone (no pip configuration of this
# machine), so it pins exactly the files the containers install from.
py=${VENV:-$repo/.venv}/bin/python
PIP_CONFIG_FILE=/dev/null PIP_FIND_LINKS='' "$py" -m verl_pascal.prefetch.hashlock --python-version 3.11 \
  --index-url "file://$out/mirror/simple" -o "$out/torch-locks/torch-$torch_standin_version/py3.11.txt" \
  --header "STAND-IN lock, generated by scripts/build-standins.sh: the real torch CPU wheel and its dependencies." \
  "torch==$torch_standin_version"

# --- nvidia-smi, checksums, manifest, lock overrides -------------------------
install -m 0755 "$src/nvidia-smi" "$out/nvidia-smi"
(cd "$out/mirror" && sha256sum -- *.run *.tar.xz *.sh *.tar.gz >SHA256SUMS)
sum() { sha256sum "$out/mirror/$1" | cut -d' ' -f1; }
size() { stat -c %s "$out/mirror/$1"; }
python3 - "$out/mirror" <<'PY'
import hashlib, json, os, sys
mirror = sys.argv[1]
entries = []
for name in sorted(os.listdir(mirror)):
    if name in ("SHA256SUMS", "manifest.json") or os.path.isdir(os.path.join(mirror, name)):
        continue
    data = open(os.path.join(mirror, name), "rb").read()
    entries.append({"name": name, "url": "stand-in", "size": len(data),
                    "sha256": hashlib.sha256(data).hexdigest()})
with open(os.path.join(mirror, "manifest.json"), "w") as f:
    json.dump({"format": 1, "files": entries}, f, indent=2)
PY
cat >"$out/standins.yml" <<YML
---
# Generated by scripts/build-standins.sh: lock entries for the STAND-IN artifacts.
cuda_runfile_sha256: $(sum "$cuda_name")
cuda_runfile_size: $(size "$cuda_name")
cudnn_archive_sha256: $(sum "$cudnn_top.tar.xz")
cudnn_archive_size: $(size "$cudnn_top.tar.xz")
miniforge_sha256: $(sum "$miniforge_name")
apex_archive_sha256: $(sum "$apex_top.tar.gz")
python_version: "3.11.2"  # STAND-IN override: the stand-in conda can only provide the container's Python (Debian 12)
torch_version: "$torch_standin_version"  # STAND-IN override: the real CPU wheel from the pip find-links folder
torchvision_version: ""  # STAND-IN override: skipped (no CPU wheel here)
torchaudio_version: ""  # STAND-IN override: skipped (no CPU wheel here)
pytorch_lock_dir: "$out/torch-locks"  # STAND-IN override: the lock generated above for the stand-in torch
YML
# --- verl: the lock's sdists and their dependency locks, with verl-pascal-prefetch
# The command a site runs to fill its mirror (README: "Offline and fleets"):
# each release of verl_releases (found on the index's simple API; its sha256 is the
# lock's) and, for the stand-in Python and torch, each dependency lock as wheels
# (sdists where a project has none); setuptools and wheel, to build those and
# verl's tree offline, are in simple/ already. pip's HTTP cache is this user's
# own (never the containers' pip cache), so a rebuild downloads nothing again.
torch_ab=$(echo "${torch_standin_version%%+*}" | cut -d. -f1,2)
locks=()
for lock in "$repo"/verl_pascal/releases/verl-*/py3.11-torch"$torch_ab".txt; do
  [[ -f $lock ]] && locks+=("--pip-lock=$lock")
done
"$py" -m verl_pascal.prefetch.cli --mirror "$out/mirror" \
  --no-progress --var python_version=3.11.2 --only verl_releases "${locks[@]}"

# --- a verl release no folder supports: the upgrade scenario's refused release --
# STAND-IN verl 99.0.0: the 0.5.0 sdist with its version rewritten, so that the
# scenario's refused release can never become a supported one. It goes into the
# mirror (and its records) with its sha256 in standins.yml, with a copy of 0.5.0's
# stand-in lock under verl-locks/, so the play gets as far as the patcher.
VERL_050_LOCK="$repo/verl_pascal/releases/verl-0.5.0/py3.11-torch2.13.txt" "$py" - "$out" <<'PY'
import hashlib, io, json, os, shutil, sys, tarfile
out = sys.argv[1]
mirror = os.path.join(out, "mirror")
src, name, version = os.path.join(mirror, "verl-0.5.0.tar.gz"), "verl-99.0.0.tar.gz", "99.0.0"
buf = io.BytesIO()
with tarfile.open(src) as old, tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as new:
    for member in old.getmembers():
        data = old.extractfile(member).read() if member.isfile() else None
        member.name = member.name.replace("verl-0.5.0", "verl-" + version, 1)
        if data is not None and member.name.endswith(("/verl/version/version", "/PKG-INFO")):
            data = data.replace(b"0.5.0", version.encode())
        if data is not None:
            member.size = len(data)
        member.mtime = 0
        new.addfile(member, io.BytesIO(data) if data is not None else None)
data = buf.getvalue()
with open(os.path.join(mirror, name), "wb") as f:
    f.write(data)
sha = hashlib.sha256(data).hexdigest()
with open(os.path.join(mirror, "manifest.json")) as f:
    manifest = json.load(f)
manifest["files"] = [e for e in manifest["files"] if e["name"] != name] + [
    {"name": name, "url": "stand-in", "size": len(data), "sha256": sha}]
with open(os.path.join(mirror, "manifest.json"), "w") as f:
    json.dump(manifest, f, indent=2)
with open(os.path.join(mirror, "SHA256SUMS")) as f:
    sums = [line for line in f if not line.rstrip().endswith(" " + name)]
with open(os.path.join(mirror, "SHA256SUMS"), "w") as f:
    f.writelines(sums + [f"{sha}  {name}\n"])
locks = os.path.join(out, "verl-locks", "verl-" + version)
os.makedirs(locks, exist_ok=True)
shutil.copy(os.environ["VERL_050_LOCK"], locks)
with open(os.path.join(out, "standins.yml"), "a") as f:
    f.write(f"# STAND-IN verl {version}: a release without a folder (the upgrade scenario's refused release).\n"
            f"standin_refused_verl: {{version: \"{version}\", sdist: \"{name}\", sha256: \"{sha}\", "
            f"lock_dir: \"{os.path.join(out, 'verl-locks')}\"}}\n")
PY
echo "$stamp" >"$out/.stamp"
echo "build-standins: built in $out"
