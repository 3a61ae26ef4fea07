"""A role's inputs are declared in its argument_specs and valued in one place.

argument_specs declares every input a role reads (type, description, whether
it is required); the value a role starts from lives in its defaults/main.yml,
or, for a site-wide variable, in inventory/group_vars/all/. A spec that stated
a default too would be a second copy, which documents one thing while the
role does another.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Tuple

import pytest
import yaml

from conftest import REPO_ROOT as REPO  # noqa: E402
GROUP_VARS: Dict[str, Any] = {}
for _path in sorted((REPO / "inventory" / "group_vars" / "all").glob("*.yml")):
    GROUP_VARS.update(yaml.safe_load(_path.read_text()) or {})


def options() -> Iterator[Tuple[str, str, str, Dict[str, Any]]]:
    """(role, entry point, option, its spec) for every option of every role's argument_specs."""
    for spec in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        role = spec.parent.parent.name
        for entry, body in yaml.safe_load(spec.read_text())["argument_specs"].items():
            for name, option in (body.get("options") or {}).items():
                yield role, entry, name, option


CASES = list(options())


def test_there_is_something_to_check() -> None:
    assert len(CASES) > 100


def test_no_spec_states_a_default() -> None:
    stated = [f"roles/{role}/meta/argument_specs.yml ({entry}): {name}" for role, entry, name, option in CASES
              if "default" in option]
    assert stated == [], "the value lives in defaults/main.yml or group_vars, never a second time in the spec"


@pytest.mark.parametrize(("role", "entry", "name", "option"), [c for c in CASES if not c[3].get("required")],
                         ids=[f"{r}.{e}.{n}" for r, e, n, o in CASES if not o.get("required")])
def test_an_optional_input_has_its_value_in_one_place(role: str, entry: str, name: str, option: Dict[str, Any]) -> None:
    """An input a user may leave out starts from defaults/main.yml or group_vars, or the role asks
    whether it is defined before it reads it; else the role would read an undefined variable."""
    defaults_file = REPO / "roles" / role / "defaults" / "main.yml"
    defaults = (yaml.safe_load(defaults_file.read_text()) or {}) if defaults_file.exists() else {}
    tasks = " ".join(p.read_text() for p in (REPO / "roles" / role / "tasks").glob("*.yml"))
    assert name in defaults or name in GROUP_VARS or f"{name} is defined" in tasks, (
        f"roles/{role}/meta/argument_specs.yml ({entry}): {name} is optional and nothing gives it a value: "
        f"give it one in roles/{role}/defaults/main.yml, or mark it required")
