"""The journal of a patch being written: every file's new content and the hash of its old,
written before the files; rolled forward by the run that wrote it or, after a kill, by
the next."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence

from .atomic import fsync_dir, read_bytes, sha256_of, write_file, write_point
from .errors import InterruptedPatchError
from .kinds import ENGINE_VERSION
from .model import Plan
from .tree import root_rel

JOURNAL_NAME = ".verl_pascal_patch.journal"  # present only while a patch is being written
JOURNAL_FORMAT = 1


def journal_path(package_dir: str) -> str:
    return os.path.join(package_dir, JOURNAL_NAME)


@dataclass
class JournalEntry:
    """One file of a patch: its path inside the package, the hash of its old bytes (None: absent), its new text."""

    rel: str
    before_sha256: Optional[str]
    after: str


def journal_text(plan: Plan) -> str:
    entries = [
        {
            "path": os.path.relpath(c.path, plan.package_dir).replace(os.sep, "/"),
            "before_sha256": sha256_of(None if c.before is None else c.before.encode("utf-8")),
            "after": c.after,
        }
        for c in plan.changes
    ]
    data = {
        "format": JOURNAL_FORMAT,
        "engine_version": ENGINE_VERSION,
        "profile": plan.profile,
        "attn": plan.attn,
        "files": entries,
    }
    return json.dumps(data, sort_keys=True) + "\n"


def _unreadable_journal(path: str, why: str) -> InterruptedPatchError:
    return InterruptedPatchError(
        "%s: the journal of an interrupted patch is unreadable (%s); reinstall verl from its sdist, "
        "then delete this file" % (path, why)
    )


def _entry(path: str, item: object) -> JournalEntry:
    if not isinstance(item, dict):
        raise _unreadable_journal(path, "an entry is not an object")
    rel, before, after = item.get("path"), item.get("before_sha256"), item.get("after")
    if not isinstance(rel, str) or not isinstance(after, str) or not (before is None or isinstance(before, str)):
        raise _unreadable_journal(path, "an entry lacks path, before_sha256 or after")
    parts = rel.split("/")
    if rel.startswith("/") or ".." in parts or "" in parts:
        raise _unreadable_journal(path, "path %r leaves the package" % rel)
    return JournalEntry(rel, before, after)


def read_journal(package_dir: str) -> Optional[List[JournalEntry]]:
    """The entries of an interrupted patch's journal; None when there is none."""
    path = journal_path(package_dir)
    raw = read_bytes(path)
    if raw is None:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise _unreadable_journal(path, str(exc))
    if not isinstance(data, dict) or data.get("format") != JOURNAL_FORMAT or not isinstance(data.get("files"), list):
        raise _unreadable_journal(path, "not a format-%d journal" % JOURNAL_FORMAT)
    return [_entry(path, item) for item in data["files"]]


def entry_path(package_dir: str, entry: JournalEntry) -> str:
    return os.path.join(package_dir, *entry.rel.split("/"))


def unwritten_entries(package_dir: str, entries: Sequence[JournalEntry]) -> List[JournalEntry]:
    """Entries whose file still holds its old bytes; raise if a file holds neither old nor new bytes."""
    todo: List[JournalEntry] = []
    for entry in entries:
        current = read_bytes(entry_path(package_dir, entry))
        if current == entry.after.encode("utf-8"):
            continue
        if sha256_of(current) != entry.before_sha256:
            raise InterruptedPatchError(
                "%s: changed since the interrupted patch recorded in %s was written (it holds neither its "
                "old nor its new content); reinstall verl from its sdist, then delete that journal"
                % (entry.rel, journal_path(package_dir))
            )
        todo.append(entry)
    return todo


def roll_forward(package_dir: str) -> List[str]:
    """Complete the patch the journal records, then remove the journal.

    Returns the files that were written ("verl/..."); [] when there is no journal.
    """
    entries = read_journal(package_dir)
    if entries is None:
        return []
    todo = unwritten_entries(package_dir, entries)  # checks every file before writing any
    for entry in todo:
        write_file(entry_path(package_dir, entry), entry.after.encode("utf-8"))
    for directory in sorted({os.path.dirname(entry_path(package_dir, e)) for e in todo}):
        fsync_dir(directory)
    write_point()
    os.unlink(journal_path(package_dir))
    fsync_dir(package_dir)
    return [root_rel(package_dir, entry_path(package_dir, e)) for e in todo]
