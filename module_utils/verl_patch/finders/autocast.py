"""The ``autocast_bf16`` finder: ``torch.autocast(..., dtype=torch.bfloat16)`` becomes a
disabled fp32 autocast (an exact no-op context)."""

from __future__ import annotations

import ast
from typing import Dict, List, Optional, Tuple

from ..context import FoundSite, ScanContext
from ..kinds import KEPT, KIND_AUTOCAST, PATCHED, PENDING
from ..names import call_argument, dotted_name, is_false
from ..source import Edit

# Where each autocast flavour takes its parameters, in positional order.
_AUTOCAST_NEW = ("device_type", "dtype", "enabled", "cache_enabled")
_AUTOCAST_OLD = ("enabled", "dtype", "cache_enabled")
AUTOCAST_SIGNATURES: Dict[str, Tuple[str, ...]] = {
    "torch.autocast": _AUTOCAST_NEW,
    "torch.amp.autocast": _AUTOCAST_NEW,
    "torch.amp.autocast_mode.autocast": _AUTOCAST_NEW,
    "torch.cuda.amp.autocast": _AUTOCAST_OLD,
    "torch.cuda.amp.autocast_mode.autocast": _AUTOCAST_OLD,
    "torch.cpu.amp.autocast": _AUTOCAST_OLD,
    "torch.cpu.amp.autocast_mode.autocast": _AUTOCAST_OLD,
}


def autocast_edits(ctx: ScanContext, call: ast.Call, dtype: ast.AST, enabled: Optional[ast.AST]) -> List[Edit]:
    """dtype torch.bfloat16 -> torch.float32 (same module alias), enabled -> False."""
    edits: List[Edit] = []
    if isinstance(dtype, ast.Attribute) and dotted_name(dtype.value, ctx.aliases) == "torch":
        start, end = ctx.src.span(dtype)
        edits.append(Edit(start, end, ctx.src.segment(dtype.value) + ".float32"))
    if enabled is not None:
        start, end = ctx.src.span(enabled)
        edits.append(Edit(start, end, "False"))
    else:
        last = max(list(call.args) + [kw.value for kw in call.keywords], key=lambda n: ctx.src.span(n)[1])
        end = ctx.src.span(last)[1]
        edits.append(Edit(end, end, ", enabled=False"))
    return edits


def find_autocasts(ctx: ScanContext) -> List[FoundSite]:
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Call, []):
        assert isinstance(node, ast.Call)
        signature = AUTOCAST_SIGNATURES.get(dotted_name(node.func, ctx.aliases) or "")
        if signature is None:
            continue
        dtype = call_argument(node, "dtype", signature)
        enabled = call_argument(node, "enabled", signature)
        dtype_name = dotted_name(dtype, ctx.aliases) if dtype is not None else None
        if dtype_name == "torch.bfloat16" and dtype is not None:
            if is_false(enabled):
                found.append(FoundSite(KIND_AUTOCAST, PATCHED, node))
            elif ctx.attn is None:
                found.append(FoundSite(KIND_AUTOCAST, KEPT, node))
            else:
                found.append(FoundSite(KIND_AUTOCAST, PENDING, node, autocast_edits(ctx, node, dtype, enabled)))
        elif dtype_name == "torch.float32" and is_false(enabled):
            found.append(FoundSite(KIND_AUTOCAST, PATCHED, node))  # our rewrite; fp32 autocast is otherwise pointless
    return found
