"""Name resolution on the syntax tree: which dotted name an expression denotes after the
file's imports, which expression a call passes for a parameter, and small literal tests."""

from __future__ import annotations

import ast
from typing import Dict, Iterable, List, Optional, Sequence, Tuple


def import_aliases(nodes: Iterable[ast.AST]) -> Dict[str, str]:
    """Local name -> dotted name bound by the module's imports (any scope)."""
    aliases: Dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = node.module + "." + alias.name
    return aliases


def dotted_name(node: ast.AST, aliases: Dict[str, str]) -> Optional[str]:
    """'torch.bfloat16' for ``th.bfloat16`` after ``import torch as th``; None if not a dotted name."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value, aliases)
        return None if base is None else base + "." + node.attr
    return None


def walk_with_parents(tree: ast.AST) -> Tuple[List[ast.AST], Dict[ast.AST, ast.AST]]:
    """Every node of the tree (any order) and each node's parent, in one pass."""
    nodes: List[ast.AST] = []
    parents: Dict[ast.AST, ast.AST] = {}
    stack = [tree]
    node_type = ast.AST
    while stack:
        node = stack.pop()
        nodes.append(node)
        for name in node._fields:  # ast.iter_child_nodes, without its generator overhead
            value = getattr(node, name, None)
            if isinstance(value, list):
                for item in value:
                    if isinstance(item, node_type):
                        parents[item] = node
                        stack.append(item)
            elif isinstance(value, node_type):
                parents[value] = node
                stack.append(value)
    return nodes, parents


def str_const(node: Optional[ast.AST]) -> Optional[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    index = getattr(ast, "Index", None)  # Python 3.8 wraps subscripts in ast.Index
    if index is not None and isinstance(node, index):
        return str_const(node.value)  # type: ignore[attr-defined]
    return None


def is_false(node: Optional[ast.AST]) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def call_argument(call: ast.Call, name: str, signature: Sequence[str]) -> Optional[ast.AST]:
    """The expression passed for parameter ``name``, by keyword or position."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    index = signature.index(name)
    positional = call.args
    if any(isinstance(a, ast.Starred) for a in positional[: index + 1]):
        return None
    return positional[index] if index < len(positional) else None
