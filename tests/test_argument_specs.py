"""Every default an argument_specs file states is the value the role really starts from.

A role's argument_specs repeats some defaults for `ansible-doc` and for the
validation Ansible runs before the role: a value that differs from
defaults/main.yml (or, for site-wide variables, from inventory/group_vars/all/)
documents one thing and does another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import pytest
import yaml

from conftest import REPO_ROOT as REPO  # noqa: E402
GROUP_VARS: Dict[str, Any] = {}
for _path in sorted((REPO / "inventory" / "group_vars" / "all").glob("*.yml")):
    GROUP_VARS.update(yaml.safe_load(_path.read_text()) or {})


def stated_defaults() -> Iterator[Tuple[str, str, str, Any]]:
    """(role, entry point, option, default) for every option whose spec states a default."""
    for spec in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        role = spec.parent.parent.name
        for entry, body in yaml.safe_load(spec.read_text())["argument_specs"].items():
            for name, option in (body.get("options") or {}).items():
                if "default" in option:
                    yield role, entry, name, option["default"]


CASES = list(stated_defaults())


def test_there_is_something_to_check() -> None:
    assert len(CASES) > 30


@pytest.mark.parametrize(("role", "entry", "name", "stated"), CASES,
                         ids=[f"{r}.{e}.{n}" for r, e, n, _ in CASES])
def test_a_stated_default_is_the_real_one(role: str, entry: str, name: str, stated: Any) -> None:
    defaults_file = REPO / "roles" / role / "defaults" / "main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) or {} if defaults_file.exists() else {}
    if name in defaults:
        real, where = defaults[name], f"roles/{role}/defaults/main.yml"
    else:
        assert name in GROUP_VARS, f"{name}: argument_specs states a default that nothing defines"
        real, where = GROUP_VARS[name], "inventory/group_vars/all/"
    assert stated == real, f"roles/{role}/meta/argument_specs.yml ({entry}) says {stated!r}, {where} has {real!r}"
