"""The mirror's records: manifest.json and SHA256SUMS, and ``--verify``.

manifest.json keeps the shape the stand-in builder first wrote,
``{"format": 1, "files": [{"name", "url", "size", "sha256"}, ...]}``, where
``name`` is the path relative to the mirror (a top-level file name, or
``simple/<project>/<wheel>``), and adds optional keys: ``key`` (the lock
entry, or ``pip:<project>``) and ``source`` (``lock`` or ``pip``). Readers
that know only the four keys keep working. SHA256SUMS is ``sha256sum -c``
input for the same files.

A manifest.json that cannot be read (truncated, not an object with a
``files`` list, an entry without its four keys) is a ``ManifestError``
naming the file and how to rebuild it, never a guess at what it meant.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from .artifacts import Artifact
from .fetch import sha256_file
from .sdists import redact

MANIFEST = "manifest.json"
SHA256SUMS = "SHA256SUMS"
FORMAT = 1
ENTRY_KEYS = ("name", "url", "size", "sha256")


class ManifestError(Exception):
    """manifest.json is there but cannot be used."""


def manifest_entry(art: Artifact, size: int) -> Dict[str, Any]:
    return {"name": art.path, "url": redact(art.url), "size": size, "sha256": art.sha256,
            "key": art.key, "source": art.source}


def manifest_problem(data: Any) -> Optional[str]:
    """What is wrong with parsed manifest.json data, or None."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    files = data.get("files")
    if not isinstance(files, list):
        return "it has no \"files\" list"
    for number, entry in enumerate(files, 1):
        if not isinstance(entry, dict):
            return f"files entry {number} is not an object"
        missing = [k for k in ENTRY_KEYS if k not in entry]
        if missing:
            return f"files entry {number} ({entry.get('name', 'no name')}) lacks {', '.join(missing)}"
        if not isinstance(entry["name"], str) or not isinstance(entry["sha256"], str):
            return f"files entry {number} has a name or sha256 that is not a string"
    return None


def read_manifest(mirror: Path) -> Dict[str, Dict[str, Any]]:
    """Entries by name; an absent manifest is empty; ManifestError for one that cannot be used."""
    path = mirror / MANIFEST
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        problem: Optional[str] = f"it is not valid JSON ({exc})"
    else:
        problem = manifest_problem(data)
    if problem:
        raise ManifestError(
            f"{path} is damaged: {problem}. It is the mirror's record of its files; delete it and "
            f"{SHA256SUMS} beside it, then run verl-pascal-prefetch --mirror {mirror} again (with the options that filled "
            "the mirror): files already there with the lock's sha256 are checked and recorded again, "
            "not downloaded again")
    return {entry["name"]: entry for entry in data["files"]}


def atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_records(mirror: Path, entries: Dict[str, Dict[str, Any]]) -> None:
    """manifest.json and SHA256SUMS for ``entries`` (sorted by name)."""
    files = [entries[name] for name in sorted(entries)]
    atomic_write(mirror / MANIFEST, json.dumps({"format": FORMAT, "files": files}, indent=2) + "\n")
    atomic_write(mirror / SHA256SUMS, "".join(f"{e['sha256']}  {e['name']}\n" for e in files))


def update_records(mirror: Path, new: Iterable[Dict[str, Any]], drop: Iterable[str] = ()) -> Dict[str, Dict[str, Any]]:
    """Merge entries into the existing records; entries whose file is gone are dropped."""
    entries = read_manifest(mirror)
    for entry in new:
        entries[entry["name"]] = entry
    for name in drop:
        entries.pop(name, None)
    entries = {name: e for name, e in entries.items() if (mirror / name).is_file()}
    write_records(mirror, entries)
    return entries


def read_sums(mirror: Path) -> Dict[str, str]:
    path = mirror / SHA256SUMS
    if not path.exists():
        return {}
    sums: Dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if name:
            sums[name.lstrip("*")] = digest
    return sums


@dataclass
class Problem:
    name: str
    message: str

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


def check_file(mirror: Path, name: str, sha256: str, size: Optional[int]) -> Optional[Problem]:
    """A missing file, a wrong size or a wrong sha256, or None."""
    path = mirror / name
    if not path.is_file():
        return Problem(name, "missing")
    actual_size = path.stat().st_size
    actual = sha256_file(path).hexdigest()
    if actual != sha256:
        return Problem(name, f"sha256 mismatch: expected {sha256}, actual {actual} ({actual_size} bytes)")
    if size is not None and actual_size != size:
        return Problem(name, f"size {actual_size}, expected {size}")
    return None


def verify(mirror: Path, artifacts: Sequence[Artifact], entries: Dict[str, Dict[str, Any]],
           extra_names: Optional[Sequence[str]] = None) -> List[Problem]:
    """Check the lock's artifacts, then the manifest's other files (``extra_names``: all of them).

    Each lock artifact must be present with the lock's sha256 and recorded
    alike in the manifest; each other manifest file (pip wheels) must match
    its manifest entry; SHA256SUMS must agree with the manifest.
    """
    problems: List[Problem] = []
    for art in artifacts:
        problem = check_file(mirror, art.path, art.sha256, art.size)
        if problem:
            problems.append(problem)
        entry = entries.get(art.path)
        if entry is None:
            problems.append(Problem(art.path, f"not in {MANIFEST}"))
        elif entry.get("sha256") != art.sha256:
            problems.append(Problem(art.path, f"{MANIFEST} says sha256 {entry.get('sha256')}, the lock {art.sha256}"))
    locked = {a.path for a in artifacts}
    names = sorted(entries) if extra_names is None else list(extra_names)
    for name in names:
        if name in locked or name not in entries:
            continue
        problem = check_file(mirror, name, entries[name]["sha256"], entries[name].get("size"))
        if problem:
            problems.append(problem)
    sums = read_sums(mirror)
    for name in sorted(set(entries) & ({a.path for a in artifacts} | set(names))):
        if sums.get(name) != entries[name]["sha256"]:
            problems.append(Problem(name, f"{SHA256SUMS} disagrees with {MANIFEST}"))
    return problems
