"""What a Python environment holds, read by its own Python in one process.

The box_state module (module_utils/box_state.py) runs this file's source with
the env's python (``python -B -c SOURCE REQUEST``), as the training user, so
it must run on any Python 3.8+ with the standard library alone. REQUEST is a
JSON object; the answer, one JSON object on stdout:

- ``python``: the interpreter's version, "X.Y.Z".
- ``versions``: {name: installed version or null} for each of ``versions``.
- ``missing_pins``: the requirements of ``pins`` ("name==version") that are
  not installed at exactly that version (what ``pip install -r LOCK`` would
  install; pip itself checks no more of an installed distribution).
- ``damaged``: {name: why} for each installed distribution of ``intact``
  whose RECORD lists a file that is missing or has another size (a pip run
  cut off, a file deleted or replaced); ``files_sha256``: {name: sha256} for
  those that are whole, over RECORD and each of its files' size and mtime, so
  a stamp can name the exact install (a file rewritten since gives another).
- ``editable``: {name: source directory or null} for each of ``editable``:
  the tree an editable install (``pip install -e``) points at.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from urllib.parse import unquote

try:
    import importlib.metadata as metadata
except ImportError:  # Python < 3.8 has no importlib.metadata
    metadata = None  # type: ignore[assignment]

#: How many problems of one distribution are named (the first ones, in RECORD's order).
MAX_NAMED = 3


def same_version(found, wanted):  # type: (str, str) -> bool
    """Equal as versions (1.0 == 1.0.0, local labels included), by pip's own packaging when it is there."""
    if found == wanted:
        return True
    try:
        from pip._vendor.packaging.version import InvalidVersion, Version
    except ImportError:
        return False
    try:
        return Version(found) == Version(wanted)
    except InvalidVersion:
        return False


def split_pin(pin):  # type: (str) -> tuple
    """'name==version' -> (name, version); anything else is refused with the pin named."""
    name, sep, version = pin.partition("==")
    if not sep or not name.strip() or not version.strip():
        raise ValueError("not a pin (name==version): %r" % pin)
    return name.strip(), version.strip()


def installed_version(name):  # type: (str) -> object
    if metadata is None:
        return None
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def missing_pins(pins, version_of=installed_version):  # type: (list, object) -> list
    """The pins not installed at exactly their version."""
    out = []
    for pin in pins:
        name, version = split_pin(pin)
        found = version_of(name)  # type: ignore[operator]
        if found is None or not same_version(str(found), version):
            out.append(pin)
    return out


def record_check(dist):  # type: (object) -> tuple
    """(problems, sha256): the files RECORD lists that are missing or have another size than it says
    (the first MAX_NAMED), and one sha256 over RECORD and every listed file's size and mtime, which
    names this exact install: a file rewritten since, even at the same size, gives another."""
    problems = []
    digest = hashlib.sha256((dist.read_text("RECORD") or "").encode("utf-8"))  # type: ignore[attr-defined]
    for entry in dist.files or []:  # type: ignore[attr-defined]
        path = str(dist.locate_file(entry))  # type: ignore[attr-defined]
        try:
            st = os.stat(path)
        except OSError:
            if entry.size is not None:  # RECORD itself and compiled .pyc files carry no size
                problems.append("%s is missing" % entry)
            continue
        digest.update(("%s\0%d\0%d\0" % (entry, st.st_size, st.st_mtime_ns)).encode("utf-8", "surrogateescape"))
        if entry.size is not None and st.st_size != entry.size:
            problems.append("%s has %d bytes, RECORD says %d" % (entry, st.st_size, entry.size))
    return problems[:MAX_NAMED], digest.hexdigest()


def intact(names):  # type: (list) -> tuple
    """({name: why} for the damaged, {name: files sha256} for the whole) of the installed ones."""
    damaged, files = {}, {}
    if metadata is None:
        return damaged, files
    for name in names:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if dist.read_text("RECORD") is None:
            damaged[name] = "it has no RECORD (not installed by pip, or its metadata is damaged)"
            continue
        problems, sha = record_check(dist)
        if problems:
            damaged[name] = "; ".join(problems)
        else:
            files[name] = sha
    return damaged, files


def editable_dir(name):  # type: (str) -> object
    """The source tree of an editable install of name, or None."""
    if metadata is None:
        return None
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    url = direct.get("url", "")
    if direct.get("dir_info", {}).get("editable") and url.startswith("file://"):
        return unquote(url[len("file://"):]).rstrip("/")
    return None


def probe(request):  # type: (dict) -> dict
    damaged, files = intact(list(request.get("intact", [])))
    return {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "versions": dict((n, installed_version(n)) for n in request.get("versions", [])),
        "missing_pins": missing_pins(list(request.get("pins", []))),
        "damaged": damaged,
        "files_sha256": files,
        "editable": dict((n, editable_dir(n)) for n in request.get("editable", [])),
    }


if __name__ == "__main__":
    print(json.dumps(probe(json.loads(sys.argv[1]))))
