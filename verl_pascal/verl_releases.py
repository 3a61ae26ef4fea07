"""The verl release folders (releases/verl-X/ beside this file), for Python.

Each folder holds everything release-specific: release.yml (sdist name and
sha256, rollout mode, minimum torch, Hydra overrides, key renames, the
modules checked before activation, the patch-site table)
and the dependency locks. Ansible reads the same folders (the verl role and
the site settings); this module is how the package's commands and the tests
read them. Adding a release is adding a folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

FOLDER = Path(__file__).resolve().parent / "releases"


def folder(version: str) -> Path:
    return FOLDER / f"verl-{version}"


def read(version: str) -> Dict[str, Any]:
    """release.yml of ``version``; FileNotFoundError when there is no folder."""
    import yaml  # PyYAML: the controller's dependency, and verl's on the boxes

    data = yaml.safe_load((folder(version) / "release.yml").read_text())
    if str(data.get("version")) != version:
        raise ValueError(f"{folder(version)}/release.yml says version {data.get('version')!r}")
    return dict(data)


def versions() -> List[str]:
    """Every release with a folder, oldest first."""
    found = [p.parent.name[len("verl-"):] for p in FOLDER.glob("verl-*/release.yml")]
    return sorted(found, key=lambda v: [int(x) if x.isdigit() else x for x in v.replace(".post", ".").split(".")])


def patch_tables() -> Dict[str, Dict[str, Dict[str, int]]]:
    """version -> the sites the patcher must find in it."""
    return {version: read(version)["patch_sites"] for version in versions()}


def sdists() -> Dict[str, Dict[str, str]]:
    """version -> {sdist, sha256} of every release the verl role can install (it has a
    dependency lock): what the prefetch puts in a mirror."""
    return {v: {"sdist": r["sdist"], "sha256": r["sha256"]} for v, r in ((v, read(v)) for v in versions()) if locks(v)}


def locks(version: str) -> List[Path]:
    """The dependency locks of ``version`` (py<X.Y>-torch<A.B>.txt)."""
    return sorted(folder(version).glob("py*-torch*.txt"))
