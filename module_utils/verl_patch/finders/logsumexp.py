"""The gated ``logsumexp_rows`` finder: a logsumexp taken one row at a time becomes one
taken in chunks of rows, with the same values."""

from __future__ import annotations

import ast
from typing import List, Optional, Tuple

from ..context import FoundSite, ScanContext
from ..kinds import KEPT, KIND_LOGSUMEXP, LOGSUMEXP_CHUNK, MARKER, PATCHED, PENDING
from ..names import dotted_name
from ..source import Edit, end_line, line_end_offset

LOGSUMEXP_NOTE = "  %s rows in chunks of %d, not one kernel per token" % (MARKER, LOGSUMEXP_CHUNK)


def _is_minus_one(node: Optional[ast.AST]) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return isinstance(node.operand, ast.Constant) and node.operand.value == 1
    return isinstance(node, ast.Constant) and node.value == -1


def _logsumexp_listcomp(ctx: ScanContext, node: ast.AST) -> Optional[Tuple[str, ast.AST]]:
    """``[torch.logsumexp(v, dim=-1) for v in ROWS]``: (v, ROWS), else None."""
    if not (isinstance(node, ast.ListComp) and len(node.generators) == 1):
        return None
    gen, elt = node.generators[0], node.elt
    if gen.ifs or getattr(gen, "is_async", 0) or not isinstance(gen.target, ast.Name):
        return None
    if not (isinstance(elt, ast.Call) and dotted_name(elt.func, ctx.aliases) == "torch.logsumexp"):
        return None
    dims = [kw.value for kw in elt.keywords if kw.arg == "dim"] + list(elt.args[1:2])
    if len(elt.args) < 1 or not isinstance(elt.args[0], ast.Name) or elt.args[0].id != gen.target.id:
        return None
    if len(dims) != 1 or not _is_minus_one(dims[0]) or len(elt.keywords) + len(elt.args) != 2:
        return None
    return gen.target.id, gen.iter


def logsumexp_edits(ctx: ScanContext, call: ast.Call, var: str, rows: ast.AST) -> List[Edit]:
    """The stacked per-row loop -> chunks of rows, viewed back to the rows' shape.

    The call is replaced from its first character to its last, however many lines it spans, by one
    line; the note goes at the end of the line the call ends on, which is then the same line."""
    torch_ = ctx.src.segment(call.func.value)  # type: ignore[attr-defined]
    it = ctx.src.segment(rows)
    if not isinstance(rows, ast.Name):
        it = "(%s)" % it
    text = "%s.cat([%s.logsumexp(%s, dim=-1) for %s in %s.reshape(-1, %s.shape[-1]).split(%d)]).view(%s.shape[:-1])" % (
        torch_, torch_, var, var, it, it, LOGSUMEXP_CHUNK, it)
    start, end = ctx.src.span(call)
    note_at = line_end_offset(ctx.src, end_line(call))
    return [Edit(start, end, text), Edit(note_at, note_at, LOGSUMEXP_NOTE)]


def _is_patched_logsumexp(ctx: ScanContext, node: ast.Call) -> bool:
    """``torch.cat([torch.logsumexp(v, dim=-1) for v in ...]).view(...)`` with the note on its last line."""
    if not (isinstance(node.func, ast.Attribute) and node.func.attr == "view"):
        return False
    inner = node.func.value
    return (isinstance(inner, ast.Call) and dotted_name(inner.func, ctx.aliases) == "torch.cat"
            and bool(inner.args) and _logsumexp_listcomp(ctx, inner.args[0]) is not None
            and MARKER in ctx.src.line_text(end_line(node)))


def find_logsumexp_rows(ctx: ScanContext) -> List[FoundSite]:
    """``torch.stack([torch.logsumexp(r, dim=-1) for r in x])``, on one line or wrapped over several
    -> chunks of rows (gated)."""
    if KIND_LOGSUMEXP not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Call, []):
        assert isinstance(node, ast.Call)
        if dotted_name(node.func, ctx.aliases) == "torch.stack" and len(node.args) == 1 and not node.keywords:
            match = _logsumexp_listcomp(ctx, node.args[0])
            if match is None:
                continue
            if ctx.attn is None:
                found.append(FoundSite(KIND_LOGSUMEXP, KEPT, node))
            else:
                found.append(FoundSite(KIND_LOGSUMEXP, PENDING, node, logsumexp_edits(ctx, node, *match)))
        elif _is_patched_logsumexp(ctx, node):
            found.append(FoundSite(KIND_LOGSUMEXP, PATCHED, node))
    return found
