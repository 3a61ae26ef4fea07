"""A hostile stand-in sdist: a real sdist whose setup.py leaves a marker file when anything runs it.

``pip download --no-binary :all: verl==X`` runs an sdist's setup.py to read
its metadata before anyone compares the file with the lock; this file proves
whether a tool did that (the marker exists) or checked the sha256 first.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Dict

SETUP_PY = '''\
import pathlib
pathlib.Path({marker!r}).write_text("setup.py ran\\n")
from setuptools import setup
setup(name={name!r}, version={version!r}, py_modules=[])
'''


def hostile_sdist(folder: Path, marker: Path, name: str = "verl", version: str = "0.5.0") -> Path:
    """``<folder>/<name>-<version>.tar.gz``; its setup.py writes ``marker`` when run."""
    top = f"{name}-{version}"
    members: Dict[str, str] = {
        f"{top}/setup.py": SETUP_PY.format(marker=str(marker), name=name, version=version),
        f"{top}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    path = folder / f"{top}.tar.gz"
    path.write_bytes(buf.getvalue())
    return path
