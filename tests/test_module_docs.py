"""Every custom module's documentation is YAML that `ansible-doc` can read.

Ansible reads DOCUMENTATION, EXAMPLES and RETURN as YAML; a plain line with a
``: `` in it turns into a mapping and `ansible-doc` fails on the whole module."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict

import pytest
import yaml
from conftest import REPO_ROOT

LIBRARY = REPO_ROOT / "library"
MODULES = sorted(LIBRARY.glob("*.py"))


def _doc_strings(path: Path) -> Dict[str, str]:
    out = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            out[node.targets[0].id] = node.value.value
    return out


def test_there_are_modules_to_check() -> None:
    assert len(MODULES) >= 5


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_the_module_documents_itself_in_yaml(path: Path) -> None:
    docs = _doc_strings(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{path.name}: missing {set(docs) ^ {'DOCUMENTATION', 'EXAMPLES', 'RETURN'}}"
    parsed = {name: yaml.safe_load(text) for name, text in docs.items()}
    assert parsed["DOCUMENTATION"]["module"] == path.stem
    assert isinstance(parsed["DOCUMENTATION"].get("options", {}), dict)
    for name, option in parsed["DOCUMENTATION"].get("options", {}).items():
        assert "description" in option, f"{path.name}: option {name} has no description"


def test_python_code_imports_the_modules_logic_by_one_name() -> None:
    """module_utils/ is reached from Python as verl_pascal.module_utils only: a second name would be a second
    module object, and a test that patches one would not patch the other."""
    root = LIBRARY.parent
    offenders = []
    for folder in ("tests", "bench", "verl_pascal", "filter_plugins", "scripts"):
        for path in sorted((root / folder).rglob("*.py")):
            if "module_utils" in path.relative_to(root).parts[1:]:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
                offenders += [f"{path.relative_to(root)}:{node.lineno}" for name in names
                              if name == "module_utils" or name.startswith("module_utils.")]
    assert offenders == [], "import verl_pascal.module_utils instead: " + ", ".join(offenders)
