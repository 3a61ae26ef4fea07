"""One file: every site the finders find in it, as Sites, and the rewrite that patches
them, compiled and re-scanned before anything is written."""

from __future__ import annotations

import ast
import os
from typing import Dict, FrozenSet, List, Optional, Tuple

from .context import FoundSite, ScanContext
from .errors import RewriteError
from .finders import FINDERS
from .kinds import KIND_BERT, KIND_MIXED_PRECISION, PENDING, REPLAY_POLL_PARAM
from .model import FileChange, Site
from .names import import_aliases, walk_with_parents
from .source import SourceText, apply_edits, line_end_offset, parse, src_line
from .source import end_line as last_line_of
from .tree import read_source

TRIGGERS = ("autocast", "flash_attn", "attn_implementation", "MixedPrecision", "num_return_sequences", "logsumexp",
            REPLAY_POLL_PARAM)


def scan_text(
    text: str, rel: str, attn: Optional[str], previous_attn: Optional[str], gated: FrozenSet[str] = frozenset()
) -> List[FoundSite]:
    """All sites of one file's text, in source order; ``gated``: the gated kinds to look for here."""
    nodes, parents = walk_with_parents(parse(text, rel))
    by_type: Dict[type, List[ast.AST]] = {}
    for node in nodes:
        by_type.setdefault(type(node), []).append(node)
    imports = by_type.get(ast.Import, []) + by_type.get(ast.ImportFrom, [])
    ctx = ScanContext(rel, SourceText(text), by_type, import_aliases(imports), parents, attn, previous_attn, gated)
    found = [site for finder in FINDERS for site in finder(ctx)]
    found.sort(key=lambda s: (s.node.lineno, s.node.col_offset))  # type: ignore[attr-defined]
    return found


def to_site(rel: str, src: SourceText, found: FoundSite) -> Site:
    start, end = src.span(found.node)
    if found.kind in (KIND_BERT, KIND_MIXED_PRECISION) and found.edits:  # whole lines; the note at a line's end
        start = min([start] + [e.start for e in found.edits])
        end = max([end] + [e.end for e in found.edits])
    # The edits on the site's own lines (a kind may also insert lines elsewhere in the file).
    last = max(end, line_end_offset(src, last_line_of(found.node)))
    growth = sum(len(e.text) - (e.end - e.start) for e in found.edits if start <= e.start and e.end <= last)
    after = apply_edits(src.text, found.edits)[start : end + growth]
    node_start, node_end = src.span(found.node)
    line, col = src.position(node_start)
    end_line, end_col = src.position(node_end)
    return Site(rel, line, col, end_line, end_col, found.kind, found.state, src.text[start:end], after)


def verify_rewrite(rel: str, after: str, attn: str, gated: FrozenSet[str] = frozenset()) -> None:
    """The rewritten text compiles and holds no pending site."""
    try:
        compile(after, rel, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise RewriteError(
            "%s: the rewrite does not compile (%s, line %s); nothing was written" % (rel, exc.msg, exc.lineno)
        )
    left = [s for s in scan_text(after, rel, attn, attn, gated) if s.state == PENDING]
    if left:
        line = src_line(left[0].node)
        raise RewriteError("%s:%d: the rewrite left a %s site; nothing was written" % (rel, line, left[0].kind))


def plan_file(
    root: str, rel: str, attn: Optional[str], previous_attn: Optional[str], gated: FrozenSet[str] = frozenset()
) -> Tuple[List[Site], Optional[FileChange]]:
    path = os.path.join(root, rel)
    text = read_source(path, rel)
    if not any(t in text for t in TRIGGERS):
        return [], None
    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    found = scan_text(body, rel, attn, previous_attn, gated)
    src = SourceText(body)
    sites = [to_site(rel, src, f) for f in found]
    if attn is None or not any(f.state == PENDING for f in found):
        return sites, None
    after = apply_edits(body, [e for f in found for e in f.edits])
    verify_rewrite(rel, after, attn, gated)  # also catches a pending site whose rewrite did nothing
    return sites, FileChange(path, rel, text, ("\ufeff" if bom else "") + after, "source")
