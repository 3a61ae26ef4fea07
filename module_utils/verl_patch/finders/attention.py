"""The ``attn_implementation`` finder: the literal ``"flash_attention_2"`` given for the
attention (keyword, dict value, assignment, ``.get`` default, parameter default) becomes
the profile's attention."""

from __future__ import annotations

import ast
import json
import re
from typing import List, Optional

from ..context import FoundSite, ScanContext
from ..kinds import KEPT, KIND_ATTN, PATCHED, PENDING
from ..names import str_const
from ..source import Edit

FA2 = "flash_attention_2"
ATTN_NAMES = ("attn_implementation", "_attn_implementation")


def _default_owner(args: ast.arguments, node: ast.AST) -> Optional[str]:
    positional = list(getattr(args, "posonlyargs", [])) + list(args.args)
    defaults = list(args.defaults)
    for arg, default in zip(positional[len(positional) - len(defaults) :], defaults):
        if default is node:
            return arg.arg
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is node:
            return arg.arg
    return None


def _target_name(target: ast.AST) -> Optional[str]:
    if isinstance(target, ast.Name):
        return target.id
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Subscript):
        return str_const(target.slice)
    return None


def in_attn_position(node: ast.Constant, parent: Optional[ast.AST]) -> bool:
    """Is this string the value given for attn_implementation?"""
    if isinstance(parent, ast.keyword):
        return parent.arg in ATTN_NAMES
    if isinstance(parent, ast.Dict):
        return any(v is node and str_const(k) in ATTN_NAMES for k, v in zip(parent.keys, parent.values))
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        return any(_target_name(t) in ATTN_NAMES for t in targets)
    if isinstance(parent, ast.Call):
        args = parent.args
        if isinstance(parent.func, ast.Attribute) and parent.func.attr in ("get", "setdefault", "pop"):
            return len(args) >= 2 and args[1] is node and str_const(args[0]) in ATTN_NAMES
        if isinstance(parent.func, ast.Name) and parent.func.id == "setattr":
            return len(args) == 3 and args[2] is node and str_const(args[1]) in ATTN_NAMES
        return False
    if isinstance(parent, ast.arguments):
        return _default_owner(parent, node) in ATTN_NAMES
    return False


def literal_like(segment: str, value: str) -> str:
    """``value`` as a literal in the quote style of ``segment`` ("x" or 'x', optional u prefix)."""
    match = re.match(r"^([uU]?)(['\"])[A-Za-z0-9_]*\2$", segment)
    if match:
        return match.group(1) + match.group(2) + value + match.group(2)
    return json.dumps(value)


def find_attn_literals(ctx: ScanContext) -> List[FoundSite]:
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Constant, []):
        value = str_const(node)
        if value is None or not in_attn_position(node, ctx.parents.get(node)):  # type: ignore[arg-type]
            continue
        start, end = ctx.src.span(node)
        if value == FA2:
            if ctx.attn is None:
                found.append(FoundSite(KIND_ATTN, KEPT, node))
            else:
                found.append(
                    FoundSite(
                        KIND_ATTN, PENDING, node, [Edit(start, end, literal_like(ctx.src.segment(node), ctx.attn))]
                    )
                )
        elif ctx.previous_attn is not None and value == ctx.previous_attn:
            if ctx.attn is None or value == ctx.attn:
                found.append(FoundSite(KIND_ATTN, PATCHED, node))
            else:  # patched earlier with the other attention: retarget
                found.append(
                    FoundSite(
                        KIND_ATTN, PENDING, node, [Edit(start, end, literal_like(ctx.src.segment(node), ctx.attn))]
                    )
                )
    return found
