"""What a run finds and would do: a Site, a FileChange, and the Plan that holds them
(with its reports: the table entry, the diffs, the dictionary the module returns)."""

from __future__ import annotations

import difflib
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, Iterable, List, Optional

from .kinds import ENGINE_VERSION, KINDS, PATCH_FP32, PATCHED, PENDING
from .tree import MANIFEST_NAME


@dataclass
class Site:
    """One hard-coded site; line and columns are 1-based line and 0-based character columns."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int
    kind: str
    state: str
    before: str
    after: str

    def describe(self) -> str:
        text = " ".join(self.before.split())
        return "%s:%d:%d: %s (%s): %s" % (self.file, self.line, self.col + 1, self.kind, self.state, text)


@dataclass
class FileChange:
    """New content for one file; ``before`` is None for a file that does not exist yet."""

    path: str
    rel: str
    before: Optional[str]
    after: str
    kind: str


@dataclass
class Plan:
    """Everything a run would do, computed without writing anything."""

    source: str
    package_dir: str
    verl_version: str
    profile: str
    attn: str
    supported: bool
    patch: str = PATCH_FP32
    sites: List[Site] = field(default_factory=list)
    changes: List[FileChange] = field(default_factory=list)
    warnings: List[str] = field(default_factory=list)
    interrupted: Optional[str] = None  # check mode: the journal of an interrupted patch, not yet rolled forward
    recovered: List[str] = field(default_factory=list)  # files this run wrote to complete an interrupted patch
    leftovers: List[str] = field(default_factory=list)  # stray temporary files removed (check mode: found)

    @property
    def manifest_path(self) -> str:
        return os.path.join(self.package_dir, MANIFEST_NAME)

    @property
    def pending(self) -> List[Site]:
        return [s for s in self.sites if s.state == PENDING]

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.recovered or self.leftovers or self.interrupted)

    def table_entry(self) -> Dict[str, Dict[str, int]]:
        """The patch_sites table (release.yml) that matches what was found."""
        return counts_by_file(s for s in self.sites if s.state in (PENDING, PATCHED))

    def diffs(self) -> List[Dict[str, str]]:
        """Ansible-style diffs: one {before_header, after_header, before, after} per changed file."""
        return [
            {
                "before_header": c.rel if c.before is not None else "/dev/null",
                "after_header": c.rel,
                "before": c.before or "",
                "after": c.after,
            }
            for c in self.changes
        ]

    def unified_diff(self) -> str:
        parts: List[str] = []
        for c in self.changes:
            parts.extend(
                difflib.unified_diff(
                    (c.before or "").splitlines(True),
                    c.after.splitlines(True),
                    "a/" + c.rel if c.before is not None else "/dev/null",
                    "b/" + c.rel,
                )
            )
        return "".join(parts)

    def to_dict(self) -> Dict[str, object]:
        return {
            "changed": self.changed,
            "source": self.source,
            "verl_version": self.verl_version,
            "supported": self.supported,
            "profile": self.profile,
            "patch": self.patch,
            "attn": self.attn,
            "engine_version": ENGINE_VERSION,
            "manifest": self.manifest_path,
            "counts": {kind: sum(1 for s in self.sites if s.kind == kind) for kind in KINDS},
            "pending": len(self.pending),
            "sites": [asdict(s) for s in self.sites],
            "files_changed": [c.rel for c in self.changes],
            "warnings": list(self.warnings),
            "interrupted": self.interrupted,
            "recovered": list(self.recovered),
            "leftovers": list(self.leftovers),
            "table_entry": self.table_entry(),
        }


def counts_by_file(sites: Iterable[Site]) -> Dict[str, Dict[str, int]]:
    table: Dict[str, Dict[str, int]] = {}
    for site in sites:
        kinds = table.setdefault(site.file, {})
        kinds[site.kind] = kinds.get(site.kind, 0) + 1
    return table
