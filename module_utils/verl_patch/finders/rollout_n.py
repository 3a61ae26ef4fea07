"""The gated ``hf_rollout_n`` finder: verl 0.5.0's HF rollout samples rollout.n responses
for prompts its trainer has already repeated; the count becomes 1."""

from __future__ import annotations

import ast
from typing import List

from ..context import FoundSite, ScanContext, value_site
from ..kinds import KIND_ROLLOUT_N, MARKER
from ..names import str_const
from ..source import src_line

ROLLOUT_N_KEY = "num_return_sequences"
ROLLOUT_N_NOTE = "  " + MARKER + " the trainer already repeats each prompt rollout.n times"


def find_rollout_n(ctx: ScanContext) -> List[FoundSite]:
    """``"num_return_sequences": <...>.n`` in a dict literal -> 1 (gated: only where the table lists it)."""
    if KIND_ROLLOUT_N not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Dict, []):
        for key, value in zip(node.keys, node.values):  # type: ignore[attr-defined]
            if str_const(key) != ROLLOUT_N_KEY:
                continue
            marked = isinstance(value, ast.Constant) and MARKER in ctx.src.line_text(src_line(value))
            if marked or (isinstance(value, ast.Attribute) and value.attr == "n"):
                found.append(value_site(ctx, KIND_ROLLOUT_N, value, 1, "1", ROLLOUT_N_NOTE))
    return found
