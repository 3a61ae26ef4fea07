"""The ``mixed_precision_bf16`` finder: an FSDP mixed-precision policy given
``torch.bfloat16`` literally gets ``torch.float32``, and its line is marked."""

from __future__ import annotations

import ast
from typing import Dict, List, Tuple

from ..context import FoundSite, ScanContext
from ..errors import RewriteError
from ..kinds import KEPT, KIND_MIXED_PRECISION, MARKER, PATCHED, PENDING
from ..names import call_argument, dotted_name
from ..source import Edit, end_line, line_end_offset, src_line

# FSDP's mixed-precision policies (torch.distributed.fsdp; verl re-exports FSDP2's from verl.utils.fsdp_utils),
# by the last part of their name, with the dtypes each takes in positional order.
MIXED_PRECISION_SIGNATURES: Dict[str, Tuple[str, ...]] = {
    "MixedPrecision": ("param_dtype", "reduce_dtype", "buffer_dtype"),
    "MixedPrecisionPolicy": ("param_dtype", "reduce_dtype", "output_dtype"),
}
MIXED_PRECISION_NOTE = "  %s fp32 parameters and compute (Pascal has no bf16)" % MARKER


def mixed_precision_dtypes(ctx: ScanContext, call: ast.Call) -> List[ast.AST]:
    """The dtypes a call of an FSDP mixed-precision policy is given (by keyword or position); [] for other calls."""
    name = dotted_name(call.func, ctx.aliases) or ""
    signature = MIXED_PRECISION_SIGNATURES.get(name.rsplit(".", 1)[-1])
    if signature is None:
        return []
    given = [call_argument(call, param, signature) for param in signature]
    return [arg for arg in given if arg is not None]


def torch_float32(ctx: ScanContext, dtype: ast.AST) -> str:
    """``torch.float32`` as this file can spell it: through the same module alias as ``dtype``, or any name
    the file binds to torch."""
    if isinstance(dtype, ast.Attribute) and dotted_name(dtype.value, ctx.aliases) == "torch":
        return ctx.src.segment(dtype.value) + ".float32"
    modules = sorted(local for local, target in ctx.aliases.items() if target == "torch")
    if modules:
        return ("torch" if "torch" in modules else modules[0]) + ".float32"
    raise RewriteError(
        "%s:%d: a bf16 mixed-precision dtype in a file that does not import torch as a module; "
        "add this form to verl_patch" % (ctx.rel, src_line(dtype))
    )


def find_mixed_precision(ctx: ScanContext) -> List[FoundSite]:
    """``MixedPrecision(param_dtype=torch.bfloat16, ...)`` (FSDP1 or FSDP2's policy) -> torch.float32, marked."""
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Call, []):
        assert isinstance(node, ast.Call)
        dtypes = mixed_precision_dtypes(ctx, node)
        bf16 = [d for d in dtypes if dotted_name(d, ctx.aliases) == "torch.bfloat16"]
        if not bf16:
            if any(dotted_name(d, ctx.aliases) == "torch.float32" and MARKER in ctx.src.line_text(end_line(d))
                   for d in dtypes):
                found.append(FoundSite(KIND_MIXED_PRECISION, PATCHED, node))
            continue
        if ctx.attn is None:
            found.append(FoundSite(KIND_MIXED_PRECISION, KEPT, node))
            continue
        edits = [Edit(*ctx.src.span(d), torch_float32(ctx, d)) for d in bf16]
        note_at = line_end_offset(ctx.src, end_line(bf16[0]))
        edits.append(Edit(note_at, note_at, MIXED_PRECISION_NOTE))
        found.append(FoundSite(KIND_MIXED_PRECISION, PENDING, node, edits))
    return found
