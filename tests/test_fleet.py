"""The fleet check: every host of a play must resolve to one stack before anything changes.

The logic (module_utils/fleet.py) on its own, then the preflight role's own
task (roles/preflight/tasks/fleet.yml, with the role's vars) on a play of two
local hosts whose inventory gives them the same or different settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from conftest import ANSIBLE, REPO_ROOT

from module_utils.fleet import FleetError, differences, message

STACK = {"verl_version": "0.5.0", "torch_version": "2.6.0+cu118", "cuda_version": "11.8.0",
         "cudnn_version": "8.9.7.29", "python_version": "3.10.12"}


def test_one_stack_has_no_differences() -> None:
    assert differences({"a": STACK, "b": dict(STACK), "c": dict(STACK)}, "a") == []
    assert differences({"a": STACK}, "a") == []


def test_each_difference_names_the_host_the_setting_and_both_values() -> None:
    stacks = {"head": STACK, "w1": {**STACK, "verl_version": "0.6.1"},
              "w2": {**STACK, "torch_version": "2.7.1+cu118", "python_version": None}}
    assert differences(stacks, "head") == [
        "w1: verl_version is '0.6.1', head has '0.5.0'",
        "w2: python_version is unset, head has '3.10.12'",
        "w2: torch_version is '2.7.1+cu118', head has '2.6.0+cu118'",
    ]
    text = message(differences(stacks, "head"), "head", 3)
    assert "The 3 hosts of this play must run one stack, head's" in text and "3 setting(s) differ" in text


def test_values_compare_as_text() -> None:
    """A version from YAML may arrive as a number on one host and a string on another."""
    assert differences({"a": {"v": "11.8"}, "b": {"v": 11.8}}, "a") == []


def test_an_unknown_reference_is_refused() -> None:
    with pytest.raises(FleetError, match="'x' is not among the hosts"):
        differences({"a": STACK}, "x")


def play(tmp_path: Path, host_vars: Dict[str, Dict[str, str]]) -> subprocess.CompletedProcess:
    """The preflight role's fleet task on two local hosts, each with its own settings."""
    inventory = {"all": {"hosts": {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                                          **values} for name, values in host_vars.items()}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: preflight\n        tasks_from: fleet.yml\n")
    env = dict(os.environ, ANSIBLE_LIBRARY=str(REPO_ROOT / "library"), ANSIBLE_MODULE_UTILS=str(REPO_ROOT / "module_utils"),
               ANSIBLE_ROLES_PATH=str(REPO_ROOT / "roles"), ANSIBLE_HOME=str(tmp_path / "home"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    playbook = str(Path(ANSIBLE).with_name("ansible-playbook"))
    return subprocess.run([playbook, "-i", str(tmp_path / "inventory.json"), str(tmp_path / "play.yml")],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_the_role_passes_a_fleet_on_one_stack(tmp_path: Path) -> None:
    proc = play(tmp_path, {"box-a": STACK, "box-b": STACK})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.skipif(ANSIBLE is None, reason="ansible is not installed")
def test_the_role_stops_a_host_on_another_verl_naming_it(tmp_path: Path) -> None:
    proc = play(tmp_path, {"box-a": STACK, "box-b": {**STACK, "verl_version": "0.6.1"}})
    assert proc.returncode != 0
    assert "box-b: verl_version is '0.6.1', box-a has '0.5.0'" in proc.stdout
