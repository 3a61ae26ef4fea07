"""What every finder is given (the ScanContext of one file) and what it returns (FoundSite)."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional

from .kinds import KEPT, MARKER, PATCHED, PENDING
from .source import Edit, SourceText, line_end_offset, src_line


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


def value_site(ctx: ScanContext, kind: str, node: ast.AST, done: object, new_text: str, note: str) -> FoundSite:
    """A site whose value ``node`` becomes ``new_text``, with ``note`` (a comment) at its line's end:
    patched when the value is already ``done`` (a constant) with the marker on its line, kept on a
    profile that keeps verl as released, else pending with the two edits (the gated kinds)."""
    if isinstance(node, ast.Constant) and node.value == done and type(node.value) is type(done) \
            and MARKER in ctx.src.line_text(src_line(node)):
        return FoundSite(kind, PATCHED, node)
    if ctx.attn is None:
        return FoundSite(kind, KEPT, node)
    start, end = ctx.src.span(node)
    line_end = line_end_offset(ctx.src, src_line(node))
    return FoundSite(kind, PENDING, node, [Edit(start, end, new_text), Edit(line_end, line_end, note)])
