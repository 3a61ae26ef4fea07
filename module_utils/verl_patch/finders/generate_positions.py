"""The gated ``hf_generate_positions`` finder: verl's HF rollout hands its prompts' position ids to
``generate``; the keyword's value becomes None, so generate counts each new token's position."""

from __future__ import annotations

import ast
from typing import List

from ..context import FoundSite, ScanContext, value_site
from ..kinds import GENERATE_POSITIONS_KEY, KIND_GENERATE_POSITIONS, MARKER

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
        found += [value_site(ctx, KIND_GENERATE_POSITIONS, keyword.value, None, "None", GENERATE_POSITIONS_NOTE)
                  for keyword in call.keywords if keyword.arg == GENERATE_POSITIONS_KEY]
    return found
