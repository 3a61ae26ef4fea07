"""The ``bert_padding_import`` finder: ``from flash_attn.bert_padding import ...`` is
wrapped in try/except ImportError with the pure-torch copies as the fallback."""

from __future__ import annotations

import ast
from typing import List, Optional

from ..context import FoundSite, ScanContext
from ..errors import RewriteError
from ..kinds import KEPT, KIND_BERT, MARKER, PATCHED, PENDING
from ..source import NEWLINE, Edit
from ..tree import COMPAT_MODULE

BERT_MODULE = "flash_attn.bert_padding"


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError", "Exception") for n in names)


def _has_compat_fallback(node: ast.ImportFrom, parent: Optional[ast.AST]) -> bool:
    if not isinstance(parent, ast.Try) or node not in parent.body:
        return False
    for handler in parent.handlers:
        if handler.type is not None and not _catches_import_error(handler):
            continue
        for stmt in handler.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.module == COMPAT_MODULE:
                return True
    return False


def bert_import_edit(ctx: ScanContext, node: ast.ImportFrom) -> Edit:
    """Wrap the import (whole lines) in try/except ImportError with the compat fallback."""
    src = ctx.src
    start, end = src.span(node)
    last_line = node.end_lineno or node.lineno
    line_start, last_line_start = src.line_starts[node.lineno - 1], src.line_starts[last_line - 1]
    indent = src.line_text(node.lineno)[: start - line_start]
    trailing = src.line_text(last_line)[end - last_line_start :]
    if indent.strip() or (trailing.strip() and not trailing.strip().startswith("#")):
        raise RewriteError(
            "%s:%d: 'from %s import ...' shares its line with other code; "
            "put it on its own line(s) or add this form to verl_patch" % (ctx.rel, node.lineno, BERT_MODULE)
        )
    unit = "\t" if "\t" in indent else "    "
    body = NEWLINE.sub(lambda m: m.group(0) + unit, src.text[start:end])
    first_newline = NEWLINE.search(src.text)
    newline = first_newline.group(0) if first_newline else "\n"
    names = ", ".join(a.name + (" as " + a.asname if a.asname else "") for a in node.names)
    lines = [
        indent + "try:  " + MARKER + " flash-attn's helpers where it imports, pure torch otherwise",
        indent + unit + body + trailing,
        indent + "except ImportError:",
        indent + unit + "from " + COMPAT_MODULE + " import " + names,
    ]
    return Edit(line_start, last_line_start + len(src.line_text(last_line)), newline.join(lines))


def _other_bert_import(node: ast.AST) -> bool:
    """``import flash_attn.bert_padding`` or ``from flash_attn import bert_padding``."""
    if isinstance(node, ast.Import):
        return any(a.name == BERT_MODULE or a.name.startswith(BERT_MODULE + ".") for a in node.names)
    if isinstance(node, ast.ImportFrom) and node.module == "flash_attn" and not node.level:
        return any(a.name == "bert_padding" for a in node.names)
    return False


def find_bert_imports(ctx: ScanContext) -> List[FoundSite]:
    found: List[FoundSite] = []
    for node in ctx.by_type.get(ast.Import, []) + ctx.by_type.get(ast.ImportFrom, []):
        if ctx.attn is not None and _other_bert_import(node):
            raise RewriteError(
                "%s:%d: this import of %s is a form verl_patch does not rewrite; add it to verl_patch"
                % (ctx.rel, node.lineno, BERT_MODULE)  # type: ignore[attr-defined]
            )
        if not (isinstance(node, ast.ImportFrom) and node.module == BERT_MODULE and not node.level):
            continue
        if _has_compat_fallback(node, ctx.parents.get(node)):
            found.append(FoundSite(KIND_BERT, PATCHED, node))
        elif ctx.attn is None:
            found.append(FoundSite(KIND_BERT, KEPT, node))
        else:
            found.append(FoundSite(KIND_BERT, PENDING, node, [bert_import_edit(ctx, node)]))
    return found
