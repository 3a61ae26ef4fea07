"""Find every artifact of the stack in the lock.

An artifact is one file with a URL and a sha256 the lock pins. The lock says
which files those are, in two places, and nothing is guessed from names:

- the artifact registry, ``artifacts: {<id>: {name, url, sha256, size}}``
  (``size`` optional; ``name`` defaults to the URL's basename): the files the
  roles fetch by id (CUDA runfile, cuDNN, Miniforge, apex). Each is the
  artifact ``<id>``. An entry with an empty sha256 is skipped with a warning.
- the verl releases, ``verl_releases: {<version>: {sdist, sha256}}`` (the
  release folders): each is the artifact ``verl_releases[<version>]``, looked
  up by that exact file name on the package index's simple API (pip's index;
  see ``sdists``) and downloaded and checked like any other file; its ``url``
  here is the placeholder ``pip:<project>==<version>``, the manifest records
  the URL it came from. No ``pip download``: pip would run the sdist's
  setup.py before the check. An item with a ``url`` is fetched from there.

``PROVIDERS`` is the extension point: a provider takes the ``Lock`` and
returns a ``Discovery``. The model snapshot and the dataset (a later issue)
plug in here: a provider that lists each file of a hub snapshot at its pinned
revision as an ``Artifact`` with ``path`` ``hub/<repo>/<revision>/<file>``,
its ``resolve/<revision>`` URL and the sha256 the lock pins, so that the
downloader, the manifest and ``--verify`` need no change.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence
from urllib.parse import unquote, urlsplit

from verl_pascal.version_lock import Lock, LockError

RESERVED_NAMES = frozenset({"manifest.json", "SHA256SUMS", "simple", "index.html", "find-links.html"})
PIP_SDIST = "pip-sdist"
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Artifact:
    """One file of the mirror."""

    key: str  # lock entry: "cuda_runfile", "verl_releases[0.5.0]", "pip:torch"
    path: str  # where it lies in the mirror, relative, "/"-separated
    url: str
    sha256: str
    size: Optional[int] = None
    source: str = "lock"

    @property
    def filename(self) -> str:
        return posixpath.basename(self.path)


@dataclass
class Discovery:
    """What a provider found: artifacts, entries it could not use, and why."""

    artifacts: List[Artifact] = field(default_factory=list)
    errors: Dict[str, str] = field(default_factory=dict)  # key -> message
    skipped: Dict[str, str] = field(default_factory=dict)  # key -> reason (warnings)

    def extend(self, other: "Discovery") -> None:
        self.artifacts.extend(other.artifacts)
        self.errors.update(other.errors)
        self.skipped.update(other.skipped)


def url_basename(url: str) -> str:
    """The file name a URL points at (``.../a%20b.run?x=1`` -> ``a b.run``)."""
    return unquote(posixpath.basename(urlsplit(url).path))


def check_file_name(name: str) -> str:
    """A plain file name that can sit in the mirror's top directory."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise LockError(f"not a plain file name: {name!r}")
    if name in RESERVED_NAMES or name.endswith(".part"):
        raise LockError(f"file name {name!r} is reserved in the mirror")
    return name


def check_sha256(value: Any) -> str:
    text = str(value).strip().lower()
    if not _SHA256.fullmatch(text):
        raise LockError(f"not a sha256 (64 hex digits): {value!r}")
    return text


def check_size(value: Any) -> Optional[int]:
    if value is None or value == "":
        return None
    try:
        size = int(value)
    except (TypeError, ValueError) as exc:
        raise LockError(f"not a size in bytes: {value!r}") from exc
    if size < 0:
        raise LockError(f"negative size: {value!r}")
    return size


def check_url(value: Any) -> str:
    url = str(value).strip()
    if urlsplit(url).scheme not in ("http", "https"):
        raise LockError(f"not an http(s) URL: {value!r}")
    return url


def make_artifact(key: str, url: Any, sha256: Any, size: Any = None, name: Any = None) -> Artifact:
    """Validate one entry; raises LockError naming what is wrong."""
    url = check_url(url)
    file_name = check_file_name(str(name) if name not in (None, "") else url_basename(url))
    return Artifact(key=key, path=file_name, url=url, sha256=check_sha256(sha256), size=check_size(size))


def sdist_requirement(file_name: str) -> str:
    """``verl-0.5.0.tar.gz`` -> ``verl==0.5.0`` (LockError for another shape)."""
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*?)-([0-9][A-Za-z0-9.+!_]*)\.(?:tar\.gz|zip)", file_name)
    if not match:
        raise LockError(f"not an sdist file name (<project>-<version>.tar.gz): {file_name!r}")
    return f"{match.group(1)}=={match.group(2)}"


def pip_sdist_artifact(key: str, name: Any, sha256: Any, size: Any = None) -> Artifact:
    """An sdist found on pip's index by its file name (no URL in the lock), checked against the lock's sha256."""
    file_name = check_file_name(str(name))
    return Artifact(key=key, path=file_name, url=f"pip:{sdist_requirement(file_name)}",
                    sha256=check_sha256(sha256), size=check_size(size), source=PIP_SDIST)


#: The lock entry that holds the artifact registry, and the one of the verl releases.
REGISTRY = "artifacts"
RELEASES = "verl_releases"


def _rendered(lock: Lock, name: str, found: Discovery) -> Any:
    """Lock entry ``name``, rendered; None (with the error recorded in ``found``) when it cannot be."""
    try:
        return lock.get(name)
    except LockError as exc:
        found.errors[name] = str(exc)
        return None


def from_registry(lock: Lock) -> Discovery:
    """Every entry of the artifact registry (``artifacts: {<id>: {name, url, sha256, size}}``)."""
    found = Discovery()
    if REGISTRY not in lock:
        found.skipped[REGISTRY] = f"the lock has no artifact registry ({REGISTRY}: {{<id>: {{name, url, sha256}}}})"
        return found
    registry = _rendered(lock, REGISTRY, found)
    if registry is None:
        return found
    if not isinstance(registry, dict):
        found.errors[REGISTRY] = f"{REGISTRY} is not a mapping of ids to {{name, url, sha256}}"
        return found
    for key, entry in sorted(registry.items()):
        if not isinstance(entry, dict) or "url" not in entry or "sha256" not in entry:
            found.errors[key] = f"{REGISTRY}.{key} needs at least url and sha256"
            continue
        if entry.get("sha256") in (None, ""):
            found.skipped[key] = f"{REGISTRY}.{key}.sha256 is empty: not fetched (nothing to check it against)"
            continue
        try:
            found.artifacts.append(make_artifact(key, entry["url"], entry["sha256"], entry.get("size"), entry.get("name")))
        except LockError as exc:
            found.errors[key] = str(exc)
    return found


def _items(value: Any) -> Iterable[tuple]:
    if isinstance(value, list):
        return ((str(i), v) for i, v in enumerate(value))
    if isinstance(value, dict):
        return ((str(k), v) for k, v in value.items())
    return ()


def from_releases(lock: Lock) -> Discovery:
    """The sdist of each verl release (``verl_releases: {<version>: {sdist, sha256, [url, size]}}``)."""
    found = Discovery()
    if RELEASES not in lock:
        return found
    value = _rendered(lock, RELEASES, found)
    for label, item in _items(value):
        if not isinstance(item, dict):
            continue
        key = f"{RELEASES}[{item.get('version', label)}]"
        if item.get("sha256") in (None, ""):
            found.skipped[key] = "sha256 is empty: not fetched"
            continue
        if "url" not in item:
            if not item.get("sdist"):
                found.skipped[key] = "has a sha256 but no url or sdist: not fetched (add url: to the lock entry)"
                continue
            try:
                found.artifacts.append(pip_sdist_artifact(key, item["sdist"], item["sha256"], item.get("size")))
            except LockError as exc:
                found.errors[key] = str(exc)
            continue
        try:
            name = item.get("name") or item.get("sdist")
            found.artifacts.append(make_artifact(key, item["url"], item["sha256"], item.get("size"), name))
        except LockError as exc:
            found.errors[key] = str(exc)
    return found


Provider = Callable[[Lock], Discovery]

#: Every artifact source. Append a provider here to add a kind of artifact
#: (the hub snapshot and dataset provider of a later issue goes here).
PROVIDERS: List[Provider] = [from_registry, from_releases]


def discover(lock: Lock, providers: Sequence[Provider] = ()) -> Discovery:
    """All artifacts of the lock, one per mirror path; conflicting paths are errors."""
    found = Discovery()
    for provider in providers or PROVIDERS:
        found.extend(provider(lock))
    unique: Dict[str, Artifact] = {}
    for art in found.artifacts:
        other = unique.get(art.path)
        if other is None:
            unique[art.path] = art
        elif other.sha256 != art.sha256:
            found.errors[art.key] = f"file name {art.path} is also {other.key}'s, with another sha256"
    found.artifacts = sorted(unique.values(), key=lambda a: a.key)
    return found


def matches(art: Artifact, name: str) -> bool:
    """``--only NAME``: a lock entry (``cuda_runfile``; ``verl_releases`` takes all its items) or a file name."""
    return name in (art.key, art.path, art.filename) or art.key.startswith(name + "[")


def select(artifacts: Sequence[Artifact], names: Sequence[str]) -> List[Artifact]:
    """The artifacts ``--only`` names; every name must match one (LockError otherwise)."""
    if not names:
        return list(artifacts)
    unknown = [n for n in names if not any(matches(a, n) for a in artifacts)]
    if unknown:
        known = ", ".join(a.key for a in artifacts) or "none"
        raise LockError(f"--only: no artifact named {', '.join(unknown)} (known: {known})")
    return [a for a in artifacts if any(matches(a, n) for n in names)]


def select_errors(errors: Mapping[str, str], names: Sequence[str]) -> Dict[str, str]:
    """Discovery errors that matter for a ``--only`` selection (all of them without one)."""
    if not names:
        return dict(errors)
    return {k: v for k, v in errors.items() if any(k == n or k.startswith(n + "[") for n in names)}
