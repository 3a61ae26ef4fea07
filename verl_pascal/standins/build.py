"""Build the STAND-IN artifacts into OUT (default .cache/standins); test tooling only.

    verl-pascal-standins [--release VERSION] [OUT]

OUT receives:

- ``mirror/``: one stand-in per entry of the lock's artifact registry, under
  the registry's file name; ``simple/`` (PEP 503) with the real torch CPU
  wheel from pip's find-links folder and its dependencies, plus the env's
  build tools; the REAL verl sdists of the lock with the files of their
  dependency locks for the stand-in Python and torch (``verl-pascal-prefetch``);
  the STAND-IN verl 99.0.0 the upgrade scenario must refuse; ``manifest.json``,
  ``SHA256SUMS`` and the index pages, written by the prefetch's own writers.
  With ``--release VERSION`` (``make demo``), that release's sdist and lock
  files alone, and no verl 99.0.0: what one install of that release needs;
- ``nvidia-smi``, answering like a Tesla P40;
- ``torch-locks/``: the hashed torch lock for the stand-in torch;
- ``verl-locks/``: the stand-in lock for verl 99.0.0;
- ``standins.yml``: the lock variables that point a host at the stand-ins
  (the variables the registry's sha256 and size reference, and the Python
  and torch the stand-ins provide).

Rebuilt only when its inputs change (``.stamp``, which also names the releases
built: a build of every release serves a ``--release`` one). Environment:
``VERL_PASCAL_WHEELS_DIR`` (the folder with the torch wheel; default pip's
``global.find-links``), ``VERL_PASCAL_PIP_DOWNLOADS`` (pip's downloads, kept
between builds; default ``OUT/../pip-downloads``). Exit status 0 built or up
to date, 1 failed (the message says why).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from verl_pascal.prefetch import cli as prefetch_cli
from verl_pascal.prefetch.artifacts import REGISTRY, Artifact, from_registry
from verl_pascal.prefetch.fetch import sha256_file
from verl_pascal.prefetch.mirror import manifest_entry, update_records
from verl_pascal.prefetch.pipwheels import SIMPLE, project_of, write_index
from verl_pascal.version_lock import Lock

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "scripts" / "standins"
STANDIN_URL = "stand-in"
# The Python of the test containers (Debian 12), which the stand-in conda provides.
PYTHON = "3.11.2"
REFUSED_VERL = "99.0.0"
REFUSED_FROM = "0.5.0"
_REFERENCE = re.compile(r"^\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}$")


class StandinError(Exception):
    """A stand-in cannot be built; the message says what to do."""


@dataclass
class Context:
    out: Path
    work: Path

    @property
    def mirror(self) -> Path:
        return self.out / "mirror"


def tool(cmd: Sequence[str], **kwargs: object) -> None:
    """Run a tool; a failure is a StandinError with its output."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise StandinError(f"{' '.join(cmd[:3])}... failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")


def shared_library(work: Path, soname: str, dest: Path, symbol: str) -> None:
    """A real shared library with the real soname, so that ldconfig treats it as one."""
    source = work / f"{symbol}.c"
    source.write_text(f"int {symbol}(void) {{ return 0; }}\n")
    tool(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(dest), str(source)])


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


def write_tar(dest: Path, folder: Path, arcname: str, compression: str) -> None:
    """A tar of ``folder`` as ``arcname``, owned by root, the same bytes for the same files."""
    with open(dest, "wb") as raw:
        if compression == "gz":
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed, \
                    tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
                tar.add(folder, arcname=arcname, filter=_root_owned)
        else:
            with tarfile.open(fileobj=raw, mode="w:xz", format=tarfile.PAX_FORMAT) as tar:
                tar.add(folder, arcname=arcname, filter=_root_owned)


def strip_suffix(name: str, suffix: str, what: str) -> str:
    if not name.endswith(suffix):
        raise StandinError(f"the lock names the {what} {name!r}; the stand-in is a {suffix} file")
    return name[: -len(suffix)]


# --- one builder per entry of the artifact registry --------------------------

def makeself_header(work: Path) -> Path:
    """Debian's makeself header with unknown flags passed to the installer, as NVIDIA's header does."""
    text = Path("/usr/share/makeself/makeself-header.sh").read_text()
    old = '    -*)\n\techo Unrecognized flag : "\\$1" >&2\n\tMS_Help\n\texit 1\n\t;;\n'
    if old not in text:
        raise StandinError("makeself's header layout changed: cannot pass installer flags through")
    header = work / "makeself-header.sh"
    header.write_text(text.replace(old, "    -*)\n\tbreak ;;\n"))
    return header


def build_cuda_runfile(ctx: Context, name: str) -> None:
    """A makeself archive running scripts/standins/cuda-installer.sh with the real installer's flags."""
    pkg = ctx.work / "cuda"
    payload = pkg / "payload"
    payload.mkdir(parents=True)
    shutil.copy2(SRC / "cuda-installer.sh", pkg / "cuda-installer")
    for part in ("nvcc", "cuda-uninstaller", "version.json"):
        shutil.copy2(SRC / part, payload / part)
    (payload / "cuda_runtime_api.h").write_text("#pragma once\n#define CUDART_VERSION 11080\n")
    shared_library(ctx.work, "libcudart.so.11.0", payload / "libcudart.so.11.8.89", "cudaRuntimeGetVersion")
    tool(["makeself", "--quiet", "--xz", "--header", str(makeself_header(ctx.work)), str(pkg), str(ctx.mirror / name),
         "CUDA Toolkit 11.8 installer (verl-pascal STAND-IN)", "./cuda-installer"])


CUDNN_VERSION_H = """/* verl-pascal STAND-IN: same macros as cuDNN 8.9.7's header. */
#ifndef CUDNN_VERSION_H_
#define CUDNN_VERSION_H_

#define CUDNN_MAJOR 8
#define CUDNN_MINOR 9
#define CUDNN_PATCHLEVEL 7

#define CUDNN_VERSION (CUDNN_MAJOR * 1000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

#endif /* CUDNN_VERSION_H */
"""
CUDNN_HEADERS = ("cudnn", "cudnn_ops_infer", "cudnn_ops_train", "cudnn_adv_infer", "cudnn_cnn_infer")
CUDNN_LIBRARIES = ("libcudnn", "libcudnn_ops_infer", "libcudnn_ops_train", "libcudnn_cnn_infer", "libcudnn_adv_infer")


def build_cudnn_archive(ctx: Context, name: str) -> None:
    """The real layout: <top>/include/*.h, <top>/lib/*.so.8.9.7 with their links, LICENSE."""
    top_name = strip_suffix(name, ".tar.xz", "cuDNN archive")
    top = ctx.work / top_name
    (top / "include").mkdir(parents=True)
    (top / "lib").mkdir()
    (top / "include" / "cudnn_version.h").write_text(CUDNN_VERSION_H)
    for header in CUDNN_HEADERS:
        text = '/* verl-pascal STAND-IN */\n#include "cudnn_version.h"\n'
        (top / "include" / f"{header}.h").write_text(text)
        (top / "include" / f"{header}_v8.h").write_text(text)
    for lib in CUDNN_LIBRARIES:
        shared_library(ctx.work, f"{lib}.so.8", top / "lib" / f"{lib}.so.8.9.7", f"{lib}_version")
        os.symlink(f"{lib}.so.8.9.7", top / "lib" / f"{lib}.so.8")
        os.symlink(f"{lib}.so.8", top / "lib" / f"{lib}.so")
    (top / "LICENSE").write_text("verl-pascal STAND-IN for the cuDNN license text.\n")
    write_tar(ctx.mirror / name, top, top_name, "xz")


def build_miniforge_installer(ctx: Context, name: str) -> None:
    """A self-extracting shell installer (-b -p PREFIX, -u) whose conda runs on the container's python3."""
    tree = ctx.work / "miniforge"
    for folder in ("bin", "condabin", "etc/profile.d"):
        (tree / folder).mkdir(parents=True)
    src = SRC / "miniforge"
    for source, dest, mode in (("conda", "bin/conda", 0o755), ("condabin-conda", "condabin/conda", 0o755),
                               ("conda.sh", "etc/profile.d/conda.sh", 0o644)):
        shutil.copyfile(src / source, tree / dest)
        os.chmod(tree / dest, mode)
    payload = io.BytesIO()
    with gzip.GzipFile(fileobj=payload, mode="wb", mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(tree, arcname=".", filter=_root_owned)
    installer = ctx.mirror / name
    installer.write_bytes((src / "installer-header.sh").read_bytes() + payload.getvalue())
    os.chmod(installer, 0o755)


def build_apex_archive(ctx: Context, name: str) -> None:
    """scripts/standins/apex (two tiny real C extensions, both flag styles) as <top>/."""
    top_name = strip_suffix(name, ".tar.gz", "apex archive")
    shutil.copytree(SRC / "apex", ctx.work / top_name, ignore=shutil.ignore_patterns("__pycache__"))
    write_tar(ctx.mirror / name, ctx.work / top_name, top_name, "gz")


Builder = Callable[[Context, str], None]
#: A stand-in for each entry of the lock's artifact registry, by id.
BUILDERS: Dict[str, Builder] = {
    "cuda_runfile": build_cuda_runfile,
    "cudnn_archive": build_cudnn_archive,
    "miniforge_installer": build_miniforge_installer,
    "apex_archive": build_apex_archive,
}


def registry_artifacts(lock: Lock) -> List[Artifact]:
    """The registry's entries, each with a builder (a StandinError names those without)."""
    found = from_registry(lock)
    problems = dict(found.errors)
    problems.update({a.key: "no stand-in builder for it (add one to BUILDERS)" for a in found.artifacts
                     if a.key not in BUILDERS})
    if problems:
        raise StandinError("the artifact registry: " + "; ".join(f"{k}: {v}" for k, v in sorted(problems.items())))
    return found.artifacts


def build_registry(ctx: Context, lock: Lock) -> Dict[str, Artifact]:
    """Every registry entry's stand-in in the mirror, recorded; returns them by id, with their sha256 and size."""
    built: Dict[str, Artifact] = {}
    for art in registry_artifacts(lock):
        BUILDERS[art.key](ctx, art.path)
        path = ctx.mirror / art.path
        built[art.key] = Artifact(key=art.key, path=art.path, url=STANDIN_URL, sha256=sha256_file(path).hexdigest(),
                                  size=path.stat().st_size, source="standin")
    update_records(ctx.mirror, [manifest_entry(a, a.size or 0) for a in built.values()])
    return built


# --- torch, the build tools and verl from pip --------------------------------

def wheels_dir() -> Path:
    configured = os.environ.get("VERL_PASCAL_WHEELS_DIR")
    if not configured:
        proc = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                              capture_output=True, text=True)
        configured = proc.stdout.strip()
    return Path(configured) if configured else Path("/nonexistent")


def torch_wheel(folder: Path) -> Path:
    found = sorted(folder.glob("torch-*-cp311-*.whl")) if folder.is_dir() else []
    if not found:
        raise StandinError(f"no torch wheel for Python 3.11 in {folder}; set VERL_PASCAL_WHEELS_DIR")
    return found[-1]


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def pip_downloads(out: Path, wheels: Path, torch: str) -> Path:
    """torch's dependencies and the env's build tools (checked against their hashed lock), kept between builds."""
    downloads = Path(os.environ.get("VERL_PASCAL_PIP_DOWNLOADS") or out.parent / "pip-downloads")
    build_lock = REPO / "roles" / "conda" / "files" / "build-requirements.txt"
    wanted = f"torch=={torch} {sha256_file(build_lock).hexdigest()}"
    marker = downloads / ".requirements"
    if marker.is_file() and marker.read_text().strip() == wanted:
        return downloads
    downloads.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(downloads)]
    tool(pip + ["--only-binary=:all:", "--find-links", str(wheels), f"torch=={torch}"])
    tool(pip + ["--no-deps", "--require-hashes", "-r", str(build_lock)])
    marker.write_text(wanted + "\n")
    return downloads


def link_into_simple(downloads: Path, mirror: Path) -> None:
    """Each downloaded file into simple/<project>/ (hard-linked where it can be)."""
    for path in sorted(downloads.iterdir()):
        if not path.name.endswith((".whl", ".tar.gz")):
            continue
        dest = mirror / SIMPLE / project_of(path.name) / path.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copyfile(path, dest)


def torch_lock(out: Path, torch: str) -> None:
    """The pytorch role's hashed lock for the stand-in torch, resolved from simple/ alone."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": ""}
    tool([sys.executable, "-m", "verl_pascal.prefetch.hashlock", "--python-version", "3.11",
         "--index-url", (out / "mirror" / SIMPLE).as_uri(),
         "-o", str(out / "torch-locks" / f"torch-{torch}" / "py3.11.txt"),
         "--header", "STAND-IN lock, generated by verl-pascal-standins: the real torch CPU wheel and its dependencies.",
         f"torch=={torch}"], env=env)


def verl_from_the_index(mirror: Path, torch: str, release: Optional[str] = None) -> None:
    """The command a site runs to fill its mirror: each release's sdist and dependency lock's files.

    With ``release``, that release's alone (a StandinError when it has no lock for the stand-in torch).
    """
    torch_ab = ".".join(torch.split("+")[0].split(".")[:2])
    lock_name = f"py3.11-torch{torch_ab}.txt"
    releases = REPO / "verl_pascal" / "releases"
    if release is None:
        locks, only = sorted(releases.glob(f"verl-*/{lock_name}")), "verl_releases"
    else:
        locks, only = [releases / f"verl-{release}" / lock_name], f"verl_releases[{release}]"
        if not locks[0].is_file():
            raise StandinError(f"verl {release} has no lock {lock_name} for the stand-in torch "
                               f"(verl_pascal/releases/verl-{release}/): choose a release that has one")
    argv = ["--mirror", str(mirror), "--no-progress", "--var", f"python_version={PYTHON}", "--only", only]
    code = prefetch_cli.main(argv + [f"--pip-lock={lock}" for lock in locks])
    if code != 0:
        raise StandinError(f"verl-pascal-prefetch {' '.join(argv)} failed (exit {code}); see its output above")


def refused_verl(out: Path) -> Dict[str, str]:
    """STAND-IN verl 99.0.0: 0.5.0's sdist with its version rewritten, and a copy of 0.5.0's lock.

    The upgrade scenario's refused release: no folder supports it, and it can
    never become a supported one.
    """
    mirror = out / "mirror"
    name = f"verl-{REFUSED_VERL}.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(mirror / f"verl-{REFUSED_FROM}.tar.gz") as old, \
            gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as new:
        for member in old.getmembers():
            handle = old.extractfile(member) if member.isfile() else None
            data = handle.read() if handle else None
            member.name = member.name.replace(f"verl-{REFUSED_FROM}", f"verl-{REFUSED_VERL}", 1)
            if data is not None and member.name.endswith(("/verl/version/version", "/PKG-INFO")):
                data = data.replace(REFUSED_FROM.encode(), REFUSED_VERL.encode())
            if data is not None:
                member.size = len(data)
            member.mtime = 0
            new.addfile(member, io.BytesIO(data) if data is not None else None)
    (mirror / name).write_bytes(buf.getvalue())
    art = Artifact(key=f"standin:verl-{REFUSED_VERL}", path=name, url=STANDIN_URL,
                   sha256=sha256_file(mirror / name).hexdigest(), source="standin")
    update_records(mirror, [manifest_entry(art, (mirror / name).stat().st_size)])
    lock_dir = out / "verl-locks"
    (lock_dir / f"verl-{REFUSED_VERL}").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "verl_pascal" / "releases" / f"verl-{REFUSED_FROM}" / "py3.11-torch2.13.txt",
                lock_dir / f"verl-{REFUSED_VERL}")
    return {"version": REFUSED_VERL, "sdist": name, "sha256": art.sha256, "lock_dir": str(lock_dir)}


# --- standins.yml ------------------------------------------------------------

def referenced_variable(lock: Lock, key: str, field: str) -> str:
    """The variable a registry entry's field references (``{{ cuda_runfile_sha256 }}``)."""
    raw = lock.raw[REGISTRY][key].get(field)
    match = _REFERENCE.match(str(raw).strip())
    if not match:
        raise StandinError(f"{REGISTRY}.{key}.{field} is {raw!r}: the stand-ins override the lock through "
                           "variables, so it must reference one ('{{ name }}')")
    return match.group(1)


def lock_overrides(lock: Lock, built: Dict[str, Artifact]) -> Dict[str, object]:
    """The variables behind each registry entry's sha256 (and size, where it has one), for the stand-ins."""
    overrides: Dict[str, object] = {}
    for key, art in sorted(built.items()):
        overrides[referenced_variable(lock, key, "sha256")] = art.sha256
        if "size" in lock.raw[REGISTRY][key]:
            overrides[referenced_variable(lock, key, "size")] = art.size
    return overrides


def standins_yml(overrides: Dict[str, object], torch: str, out: Path, refused: Optional[Dict[str, str]]) -> str:
    lines = ["---", "# Generated by verl-pascal-standins: lock variables for the STAND-IN artifacts."]
    lines += [f"{name}: {json.dumps(value)}" for name, value in overrides.items()]
    notes = (
        ("python_version", PYTHON, "the stand-in conda can only provide the container's Python (Debian 12)"),
        ("torch_version", torch, "the real CPU wheel from the pip find-links folder"),
        ("torchvision_version", "", "skipped (no CPU wheel here)"),
        ("torchaudio_version", "", "skipped (no CPU wheel here)"),
        ("pytorch_lock_dir", str(out / "torch-locks"), "the lock generated for the stand-in torch"),
    )
    lines += [f"{name}: {json.dumps(value)}  # STAND-IN override: {why}" for name, value, why in notes]
    if refused is not None:
        lines.append("# STAND-IN verl 99.0.0: a release without a folder (the upgrade scenario's refused release).")
        lines.append(f"standin_refused_verl: {json.dumps(refused)}")
    return "\n".join(lines) + "\n"


# --- the build ----------------------------------------------------------------

def stamp_inputs() -> Iterable[Path]:
    yield Path(__file__)
    yield REPO / "verl_pascal" / "version_lock.py"  # the lock reader the build reads the registry with
    for root in (SRC, REPO / "inventory" / "group_vars" / "all", REPO / "verl_pascal" / "releases",
                 REPO / "roles" / "conda" / "files", REPO / "verl_pascal" / "prefetch", REPO / "module_utils"):
        yield from sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def stamp(wheel: Path) -> str:
    digest = hashlib.sha256(f"{wheel.name} {wheel.stat().st_size}\n".encode())
    for path in stamp_inputs():
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def check_tools() -> None:
    missing = [tool for tool in ("makeself", "gcc") if shutil.which(tool) is None]
    if missing:
        raise StandinError(f"{', '.join(missing)} missing: run scripts/setup-host.sh")


ALL_RELEASES = "all"


def up_to_date(stamp_file: Path, digest: str, release: Optional[str]) -> bool:
    """Whether the build ``stamp_file`` records has these inputs and the release wanted (or every release)."""
    if not stamp_file.is_file():
        return False
    recorded = stamp_file.read_text().split()
    return len(recorded) == 2 and recorded[0] == digest and recorded[1] in (ALL_RELEASES, release)


def build(out: Path, release: Optional[str] = None) -> str:
    """Build into ``out`` (every verl release, or ``release`` alone) unless its stamp says it is up to date."""
    wheel = torch_wheel(wheels_dir())
    digest = stamp(wheel)
    if up_to_date(out / ".stamp", digest, release):
        return f"up to date in {out}"
    check_tools()
    lock = Lock.from_paths()
    shutil.rmtree(out, ignore_errors=True)
    (out / "mirror").mkdir(parents=True)
    torch = wheel_version(wheel)
    with tempfile.TemporaryDirectory() as work:
        built = build_registry(Context(out, Path(work)), lock)
    link_into_simple(pip_downloads(out, wheel.parent, torch), out / "mirror")
    write_index(out / "mirror", {})
    torch_lock(out, torch)
    shutil.copy2(SRC / "nvidia-smi", out / "nvidia-smi")
    verl_from_the_index(out / "mirror", torch, release)
    refused = refused_verl(out) if release is None else None
    (out / "standins.yml").write_text(standins_yml(lock_overrides(lock, built), torch, out, refused))
    (out / ".stamp").write_text(f"{digest} {release or ALL_RELEASES}\n")
    return f"built in {out}" + (f" (verl {release} alone)" if release else "")


def parse_args(args: Sequence[str]) -> Optional[tuple]:
    """(OUT or None, release or None) from ``[--release VERSION] [OUT]``; None when they are not that."""
    rest, release = list(args), None
    if rest and rest[0].startswith("--release="):
        release = rest.pop(0).split("=", 1)[1]
    elif rest and rest[0] == "--release" and len(rest) > 1:
        release = rest[1]
        del rest[:2]
    if len(rest) > 1 or any(a.startswith("-") for a in rest) or release in ("", ALL_RELEASES):
        return None
    return (rest[0] if rest else None), release


def main(argv: Optional[Sequence[str]] = None) -> int:
    parsed = parse_args(list(sys.argv[1:] if argv is None else argv))
    if parsed is None:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(parsed[0]).resolve() if parsed[0] else REPO / ".cache" / "standins"
    try:
        print(f"verl-pascal-standins: {build(out, parsed[1])}")
    except StandinError as exc:
        print(f"verl-pascal-standins: {exc}", file=sys.stderr)
        return 1
    return 0


def run_cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run_cli()
