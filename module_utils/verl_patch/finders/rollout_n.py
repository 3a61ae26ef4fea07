"""The gated ``hf_rollout_n`` finder: verl 0.5.0's HF rollout samples rollout.n responses
for prompts its trainer has already repeated; the count becomes 1."""

from __future__ import annotations

import ast
from typing import List

from ..context import FoundSite, ScanContext
from ..kinds import KEPT, KIND_ROLLOUT_N, MARKER, PATCHED, PENDING
from ..names import str_const
from ..source import Edit, src_line

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
            line = ctx.src.line_text(src_line(value))
            if isinstance(value, ast.Constant) and value.value == 1 and MARKER in line:
                found.append(FoundSite(KIND_ROLLOUT_N, PATCHED, value))
            elif isinstance(value, ast.Attribute) and value.attr == "n":
                if ctx.attn is None:
                    found.append(FoundSite(KIND_ROLLOUT_N, KEPT, value))
                    continue
                start, end = ctx.src.span(value)
                line_end = ctx.src.offset(src_line(value), 0) + len(line)  # line_text has no newline
                edits = [Edit(start, end, "1"), Edit(line_end, line_end, ROLLOUT_N_NOTE)]
                found.append(FoundSite(KIND_ROLLOUT_N, PENDING, value, edits))
    return found
