# -*- coding: utf-8 -*-
"""Build the box-side wheel: the parts of verl_pascal that run on the boxes.

The boxes need a few subpackages of ``verl_pascal`` (the GSM8K converter, the
model maker, the P40-rules guard), not the controller tools. This builds a
pure-Python wheel of just those, named ``verl-pascal-box``, and makes it
reproducible so that the roles stay idempotent:

- the same sources give the same bytes (sorted entries, fixed timestamps and
  modes), so the copy to a box changes nothing on a re-run;
- the version is the project's version with the sources' hash as its local
  label (``0.1.0+1a2b3c4d5e6f``), so a changed file makes a new version that
  pip installs, and an unchanged one is "already satisfied".

The commands of pyproject.toml's ``[project.scripts]`` whose module the wheel
ships come with it (``entry_points.txt``): pip writes them into the env's
``bin/``, as for the project itself.

No setuptools and no network: a wheel is a zip file with a ``.dist-info``
folder (PEP 427), written here with the standard library only. Used by
library/box_wheel.py on the controller.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tempfile
import zipfile
from typing import Dict, List, NamedTuple, Sequence, Tuple

DIST_NAME = "verl-pascal-box"
TAG = "py3-none-any"
# Zip entries carry this date (the earliest a zip can hold), never the files' mtimes.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
SKIP_DIRS = ("__pycache__",)
SUFFIXES = (".py", ".yml", ".json", ".txt")


class BoxWheelError(Exception):
    """Bad input: a package that is not there, or no version in pyproject.toml."""


class BuiltWheel(NamedTuple):
    path: str
    filename: str
    version: str
    sha256: str
    files: List[str]
    changed: bool


def table_lines(pyproject_text: str, table: str) -> List[str]:
    """The lines of one table (``[project]``, ``[project.scripts]``, ...) of a pyproject.toml."""
    section = ""
    lines: List[str] = []
    for line in pyproject_text.splitlines():
        header = re.match(r"^\s*\[([^\]]+)\]\s*$", line)
        if header:
            section = header.group(1).strip()
        elif section == table:
            lines.append(line)
    return lines


def project_version(pyproject_text: str) -> str:
    """The ``version`` of the ``[project]`` table of a pyproject.toml."""
    for line in table_lines(pyproject_text, "project"):
        found = re.match(r'^\s*version\s*=\s*"([^"]+)"\s*$', line)
        if found:
            return found.group(1)
    raise BoxWheelError("pyproject.toml has no version in its [project] table")


def project_scripts(pyproject_text: str) -> Dict[str, str]:
    """``[project.scripts]`` of a pyproject.toml: command name -> ``module:function``."""
    scripts: Dict[str, str] = {}
    for line in table_lines(pyproject_text, "project.scripts"):
        found = re.match(r'^\s*"?([A-Za-z0-9._-]+)"?\s*=\s*"([A-Za-z0-9_.]+:[A-Za-z0-9_.]+)"\s*(#.*)?$', line)
        if found:
            scripts[found.group(1)] = found.group(2)
    return scripts


def shipped_scripts(scripts: Dict[str, str], packages: Sequence[str]) -> Dict[str, str]:
    """The scripts whose module lies in one of ``packages`` (the others would not import on a box)."""
    return {name: target for name, target in sorted(scripts.items())
            if any(target.split(":")[0] == p or target.split(":")[0].startswith(p + ".") for p in packages)}


def entry_points_text(scripts: Dict[str, str]) -> bytes:
    lines = ["[console_scripts]"] + ["{0} = {1}".format(name, target) for name, target in sorted(scripts.items())]
    return ("\n".join(lines) + "\n").encode()


def package_files(src_root: str, packages: Sequence[str]) -> Dict[str, bytes]:
    """The files of each dotted package (and its subfolders), plus its parents' ``__init__.py``.

    Keys are the paths inside the wheel (``verl_pascal/data/cli.py``).
    """
    files: Dict[str, bytes] = {}
    for package in packages:
        parts = package.split(".")
        top = os.path.join(src_root, *parts)
        if not os.path.isfile(os.path.join(top, "__init__.py")):
            raise BoxWheelError("{0}: no package at {1} (no __init__.py)".format(package, top))
        for depth in range(1, len(parts)):
            init = "/".join(parts[:depth]) + "/__init__.py"
            files[init] = _read(os.path.join(src_root, init))
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
            for name in names:
                if name.endswith(SUFFIXES):
                    path = os.path.join(folder, name)
                    files[os.path.relpath(path, src_root).replace(os.sep, "/")] = _read(path)
    return files


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def content_hash(files: Dict[str, bytes]) -> str:
    """First 12 hex digits of a sha256 over every file's name and content."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()[:12]


def wheel_filename(version: str) -> str:
    return "{0}-{1}-{2}.whl".format(DIST_NAME.replace("-", "_"), version, TAG)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def dist_info(version: str, files: Dict[str, bytes], summary: str,
              scripts: "Dict[str, str] | None" = None) -> List[Tuple[str, bytes]]:
    """METADATA, WHEEL, entry_points.txt (with ``scripts``) and RECORD, in the order the wheel holds them."""
    folder = "{0}-{1}.dist-info".format(DIST_NAME.replace("-", "_"), version)
    metadata = (
        "Metadata-Version: 2.1\nName: {0}\nVersion: {1}\nSummary: {2}\nRequires-Python: >=3.8\n".format(
            DIST_NAME, version, summary
        )
    ).encode()
    wheel = "Wheel-Version: 1.0\nGenerator: verl-pascal box_wheel\nRoot-Is-Purelib: true\nTag: {0}\n".format(
        TAG
    ).encode()
    entries = [(folder + "/METADATA", metadata), (folder + "/WHEEL", wheel)]
    if scripts:
        entries.append((folder + "/entry_points.txt", entry_points_text(scripts)))
    record_lines = [
        "{0},{1},{2}".format(name, _record_hash(data), len(data))
        for name, data in sorted(files.items()) + entries
    ]
    record_lines.append(folder + "/RECORD,,")
    entries.append((folder + "/RECORD", ("\n".join(record_lines) + "\n").encode()))
    return entries


def wheel_bytes(version: str, files: Dict[str, bytes], summary: str,
                scripts: "Dict[str, str] | None" = None) -> bytes:
    """The wheel, the same bytes for the same input."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in sorted(files.items()) + dist_info(version, files, summary, scripts):
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def build(src_root: str, packages: Sequence[str], out_dir: str, summary: str = "verl-pascal's box-side tools") -> BuiltWheel:
    """Write the wheel into ``out_dir`` unless the same file is already there."""
    with open(os.path.join(src_root, "pyproject.toml"), encoding="utf-8") as handle:
        pyproject = handle.read()
    base = project_version(pyproject)
    scripts = shipped_scripts(project_scripts(pyproject), packages)
    files = package_files(src_root, packages)
    # The commands are part of what the version stands for: a new one makes a new wheel.
    version = "{0}+{1}".format(base, content_hash({**files, "entry_points.txt": entry_points_text(scripts)}))
    data = wheel_bytes(version, files, summary, scripts)
    filename = wheel_filename(version)
    path = os.path.join(out_dir, filename)
    sha256 = hashlib.sha256(data).hexdigest()
    changed = not (os.path.isfile(path) and hashlib.sha256(_read(path)).hexdigest() == sha256)
    if changed:
        os.makedirs(out_dir, exist_ok=True)
        # A file of its own, renamed over the wheel when whole: a kill leaves no
        # half wheel, and two builds at once never write the same file.
        handle, partial = tempfile.mkstemp(prefix=".partial-", dir=out_dir)
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.chmod(partial, 0o644)
            os.replace(partial, path)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
    return BuiltWheel(path, filename, version, sha256, sorted(files), changed)
