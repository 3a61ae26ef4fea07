"""What every finder is given (the ScanContext of one file) and what it returns (FoundSite)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional

from .source import Edit, SourceText


@dataclass
class FoundSite:
    """A site with its node and, when pending, the edits that patch it."""

    kind: str
    state: str
    node: ast.AST
    edits: List[Edit] = field(default_factory=list)


@dataclass
class ScanContext:
    """Per-file state the finders share."""

    rel: str
    src: SourceText
    by_type: Dict[type, List[ast.AST]]
    aliases: Dict[str, str]
    parents: Dict[ast.AST, ast.AST]
    attn: Optional[str]  # attention to write; None: only look (native)
    previous_attn: Optional[str]  # attention of an earlier patch, from the tree's marker
    gated: FrozenSet[str] = frozenset()  # the gated kinds the release's table lists for this file
