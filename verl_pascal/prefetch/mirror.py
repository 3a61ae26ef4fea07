"""The mirror's records: manifest.json and SHA256SUMS, and ``--verify``.

manifest.json keeps the shape the stand-in builder first wrote,
``{"format": 1, "files": [{"name", "url", "size", "sha256"}, ...]}``, where
``name`` is the path relative to the mirror (a top-level file name, or
``simple/<project>/<wheel>``), and adds optional keys: ``key`` (the lock
entry, or ``pip:<project>``) and ``source`` (``lock`` or ``pip``). Readers
that know only the four keys keep working. SHA256SUMS is ``sha256sum -c``
input for the same files.

A manifest.json that cannot be read (truncated, nested too deep, not an
object with a ``files`` list, an entry without its four keys or with a value
of the wrong type) is a ``ManifestError`` naming the file, the entry and how
to rebuild it, never a guess at what it meant. So is an entry whose name
leads outside the mirror (an absolute path, a ``..`` component, a symbolic
link to elsewhere): nothing ever opens a file outside the mirror for it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .artifacts import Artifact
from .fetch import sha256_file
from .sdists import redact

MANIFEST = "manifest.json"
SHA256SUMS = "SHA256SUMS"
FORMAT = 1
ENTRY_KEYS = ("name", "url", "size", "sha256")
OPTIONAL_STRINGS = ("key", "source")
MAX_DEPTH = 32  # manifest.json itself is 3 deep: {"files": [{"name": ...}]}
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(Exception):
    """manifest.json is there but cannot be used."""


def manifest_entry(art: Artifact, size: int) -> Dict[str, Any]:
    return {"name": art.path, "url": redact(art.url), "size": size, "sha256": art.sha256,
            "key": art.key, "source": art.source}


def shown(value: Any, limit: int = 200) -> str:
    """A value for a one-line message: as it is when printable, else its repr; long ones cut."""
    text = value if isinstance(value, str) and value.isprintable() else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and objects nest more than ``limit`` levels (iterative: no recursion to exhaust)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def name_problem(name: Any) -> Optional[str]:
    """Why ``name`` is not a relative "/"-separated path inside the mirror, or None (file system not looked at)."""
    if not isinstance(name, str):
        return f"has a name that is a JSON {type(name).__name__}, not a string"
    if not name:
        return "has an empty name"
    if not name.isprintable() or "\\" in name:  # a newline would also break SHA256SUMS, one line a file
        return "has a name with a control character or a backslash"
    if name.startswith("/"):
        return "is an absolute path, not a path inside the mirror"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "has an empty, '.' or '..' component: not a plain path inside the mirror"
    return None


def value_problem(entry: Dict[str, Any]) -> Optional[str]:
    """A value of the wrong type or shape in an entry that has its four keys, or None."""
    problem = name_problem(entry["name"])
    if problem:
        return problem
    if not isinstance(entry["sha256"], str) or not _SHA256.fullmatch(entry["sha256"]):
        return f"has a sha256 that is not 64 lowercase hex digits ({shown(repr(entry['sha256']))})"
    size = entry["size"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return f"has a size that is not a number of bytes ({shown(repr(size))})"
    if not isinstance(entry["url"], str):
        return f"has a url that is a JSON {type(entry['url']).__name__}, not a string"
    for key in OPTIONAL_STRINGS:
        if key in entry and not isinstance(entry[key], str):
            return f"has a {key} that is a JSON {type(entry[key]).__name__}, not a string"
    return None


def entry_problem(number: int, entry: Any) -> Optional[str]:
    """What is wrong with files entry ``number`` (from 1), or None."""
    if not isinstance(entry, dict):
        return f"files entry {number} is not an object"
    label = f"files entry {number} ({shown(entry.get('name', 'no name'))})"
    missing = [k for k in ENTRY_KEYS if k not in entry]
    if missing:
        return f"{label} lacks {', '.join(missing)}"
    problem = value_problem(entry)
    return f"{label} {problem}" if problem else None


def manifest_problem(data: Any) -> Optional[str]:
    """What is wrong with parsed manifest.json data, or None."""
    if too_deep(data):
        return f"it is nested more than {MAX_DEPTH} levels deep"
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    files = data.get("files")
    if not isinstance(files, list):
        return "it has no \"files\" list"
    for number, entry in enumerate(files, 1):
        problem = entry_problem(number, entry)
        if problem:
            return problem
    return None


def outside(mirror: Path, name: str) -> Optional[Path]:
    """The first part of ``mirror/name`` (a symbolic link) that resolves outside the mirror, or None.

    ``name`` has passed ``name_problem``; a link inside the mirror to another place in it is fine.
    """
    root = mirror.resolve()
    path = mirror
    for part in name.split("/"):
        path = path / part
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # a loop of links
            return path
        if not resolved.is_relative_to(root):
            return path
    return None


def link_text(link: Path) -> str:
    """``LINK (to TARGET)`` for a message."""
    try:
        target = str(link.resolve())
    except (OSError, RuntimeError):
        target = "a loop of links"
    return f"{shown(str(link))} (to {shown(target)})"


def escape_problem(mirror: Path, files: Sequence[Dict[str, Any]]) -> Optional[str]:
    """The first entry whose file would be reached through a link that leads outside the mirror, or None."""
    for number, entry in enumerate(files, 1):
        link = outside(mirror, entry["name"])
        if link is not None:
            return (f"files entry {number} ({shown(entry['name'])}) leads outside the mirror through the "
                    f"symbolic link {link_text(link)}")
    return None


def rebuild_advice(mirror: Path) -> str:
    return (f"It is the mirror's record of its files; delete it and {SHA256SUMS} beside it, then run "
            f"verl-pascal-prefetch --mirror {mirror} again (with the options that filled the mirror): files "
            "already there with the lock's sha256 are checked and recorded again, not downloaded again")


def parse_manifest(path: Path) -> Tuple[Any, Optional[str]]:
    """(data, None) or (None, what is wrong with the file's text)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except RecursionError:
        return None, f"it is nested more than {MAX_DEPTH} levels deep"
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, f"it is not valid JSON ({exc})"


def read_manifest(mirror: Path) -> Dict[str, Dict[str, Any]]:
    """Entries by name; an absent manifest is empty; ManifestError for one that cannot be used."""
    path = mirror / MANIFEST
    if not path.exists():
        return {}
    data, problem = parse_manifest(path)
    if problem is None:
        problem = manifest_problem(data)
    if problem:
        raise ManifestError(f"{path} is damaged: {problem}. {rebuild_advice(mirror)}")
    problem = escape_problem(mirror, data["files"])
    if problem:
        raise ManifestError(f"{path} is refused: {problem}. The mirror's files must lie in the mirror itself: "
                            f"replace that link by the files (or remove it), then delete {MANIFEST} and "
                            f"{SHA256SUMS} and run verl-pascal-prefetch --mirror {mirror} again")
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
    """A missing file, a wrong size or a wrong sha256, or None; a file outside the mirror is never opened."""
    path = mirror / name
    link = outside(mirror, name)
    if link is not None:
        return Problem(name, f"leads outside the mirror through the symbolic link {link_text(link)}: not read; "
                             "put the file itself in the mirror")
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
