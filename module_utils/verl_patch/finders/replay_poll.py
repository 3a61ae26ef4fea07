"""The gated ``replay_poll`` finder: the replay buffer's ``poll_interval`` default becomes
REPLAY_POLL_S."""

from __future__ import annotations

import ast
from typing import List

from ..context import FoundSite, ScanContext, value_site
from ..kinds import KIND_REPLAY_POLL, MARKER, REPLAY_POLL_PARAM, REPLAY_POLL_S

REPLAY_POLL_NOTE = "  %s polls every %ss, not every %%s" % (MARKER, REPLAY_POLL_S)


def _poll_defaults(func: ast.AST) -> List[ast.Constant]:
    """The numeric default of ``func``'s parameter named REPLAY_POLL_PARAM, if it has one."""
    args = func.args  # type: ignore[attr-defined]
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return [d for a, d in pairs if a.arg == REPLAY_POLL_PARAM and isinstance(d, ast.Constant)
            and isinstance(d.value, (int, float)) and not isinstance(d.value, bool)]


def find_replay_poll(ctx: ScanContext) -> List[FoundSite]:
    """``def __init__(..., poll_interval: float = 2.0, ...)`` -> REPLAY_POLL_S (gated)."""
    if KIND_REPLAY_POLL not in ctx.gated:
        return []
    found: List[FoundSite] = []
    for func in ctx.by_type.get(ast.FunctionDef, []) + ctx.by_type.get(ast.AsyncFunctionDef, []):
        found += [value_site(ctx, KIND_REPLAY_POLL, default, REPLAY_POLL_S, repr(REPLAY_POLL_S),
                             REPLAY_POLL_NOTE % ctx.src.segment(default)) for default in _poll_defaults(func)]
    return found
