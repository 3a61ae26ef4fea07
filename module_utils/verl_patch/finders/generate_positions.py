"""The gated ``hf_generate_positions`` finder: verl's HF rollout hands its prompts' position ids to
``generate``; the keyword's value becomes None, so generate counts each new token's position."""

from __future__ import annotations

import ast
from typing import List

from ..context import FoundSite, ScanContext
from ..kinds import GENERATE_POSITIONS_KEY, KEPT, KIND_GENERATE_POSITIONS, MARKER, PATCHED, PENDING
from ..source import Edit, src_line

GENERATE_POSITIONS_NOTE = "  " + MARKER + " generate counts each new token's position from the attention mask"


def _generate_calls(ctx: ScanContext) -> List[ast.Call]:
    return [call for call in ctx.by_type.get(ast.Call, [])
            if isinstance(call.func, ast.Attribute) and call.func.attr == "generate"]  # type: ignore[attr-defined]


def find_generate_positions(ctx: ScanContext) -> List[FoundSite]:
    """``<model>.generate(..., position_ids=<expr>, ...)`` -> ``position_ids=None`` (gated)."""
    if KIND_GENERATE_POSITIONS not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for call in _generate_calls(ctx):
        for keyword in call.keywords:
            if keyword.arg != GENERATE_POSITIONS_KEY:
                continue
            value = keyword.value
            line = ctx.src.line_text(src_line(value))
            if isinstance(value, ast.Constant) and value.value is None and MARKER in line:
                found.append(FoundSite(KIND_GENERATE_POSITIONS, PATCHED, value))
            elif ctx.attn is None:
                found.append(FoundSite(KIND_GENERATE_POSITIONS, KEPT, value))
            else:
                start, end = ctx.src.span(value)
                line_end = ctx.src.offset(src_line(value), 0) + len(line)
                found.append(FoundSite(KIND_GENERATE_POSITIONS, PENDING, value, [
                    Edit(start, end, "None"), Edit(line_end, line_end, GENERATE_POSITIONS_NOTE)]))
    return found
