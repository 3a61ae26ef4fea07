"""The one rule that sizes a run for its GPU (verl_pascal/launch/compose.py, launch_preset).

The launch role (and preflight, through the role's preset.yml) and the
renderer outside Ansible (verl_pascal/launch/render.py) call the same
function; these tests hold the rule itself, that Ansible reads the knobs as
the function does, and that the renderer passes its result to the template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from verl_pascal.launch import compose, render

from conftest import REPO_ROOT as REPO
from conftest import needs_ansible, run_playbook

preset = compose
PRESETS = yaml.safe_load((REPO / "roles/launch/defaults/main.yml").read_text())["launch_memory_presets"]
NO_KNOBS: Dict[str, Any] = {"train_batch_size": 0, "ppo_mini_batch_size": 0, "micro_batch_size": 0,
                            "param_offload": "", "actor_param_offload": "", "optimizer_offload": ""}


def test_the_shipped_presets_go_from_the_largest_gpu_down_to_any_gpu() -> None:
    """First match wins: a row after a smaller one would never be picked, and a GPU below every row has none."""
    floors = [int(row["min_memory_mib"]) for row in PRESETS]
    assert floors == sorted(floors, reverse=True) and floors[-1] == 0


@pytest.mark.parametrize(("memory_mib", "row"), [(81559, 0), (24576, 0), (22000, 0), (21999, 1), (16384, 1),
                                                 (15000, 1), (12288, 2), (8192, 2)])
def test_a_gpu_gets_the_first_row_its_memory_reaches(memory_mib: int, row: int) -> None:
    got = preset.launch_preset(PRESETS, memory_mib, NO_KNOBS)
    want = PRESETS[row]
    assert {key: got[key] for key in (*preset.SIZES, *preset.OFFLOADS)} == {
        key: want[key] for key in (*preset.SIZES, *preset.OFFLOADS)}
    assert got["gpu_memory_mib"] == memory_mib


def test_the_users_knobs_win_except_0_and_empty_which_take_the_row() -> None:
    knobs = {**NO_KNOBS, "train_batch_size": "64", "micro_batch_size": 0, "param_offload": "false",
             "actor_param_offload": "yes", "optimizer_offload": ""}
    got = preset.launch_preset(PRESETS, 24576, knobs)
    assert (got["train_batch_size"], got["ppo_mini_batch_size"], got["micro_batch_size"]) == (
        64, PRESETS[0]["ppo_mini_batch_size"], PRESETS[0]["micro_batch_size"])
    assert (got["param_offload"], got["actor_param_offload"], got["optimizer_offload"]) == (
        False, True, PRESETS[0]["optimizer_offload"])


def test_grpo_sizes_are_the_rows_or_else_the_ppo_sizes_the_run_ends_up_with() -> None:
    rows = [{"min_memory_mib": 20000, "train_batch_size": 32, "ppo_mini_batch_size": 16, "micro_batch_size": 4,
             "param_offload": True, "actor_param_offload": False, "optimizer_offload": True,
             "grpo_train_responses": 128, "grpo_mini_responses": 64},
            {"min_memory_mib": 0, "train_batch_size": 8, "ppo_mini_batch_size": 4, "micro_batch_size": 1,
             "param_offload": True, "actor_param_offload": True, "optimizer_offload": True}]
    big = preset.launch_preset(rows, 24000, {**NO_KNOBS, "train_batch_size": 48})
    assert (big["grpo_train_responses"], big["grpo_mini_responses"]) == (128, 64)
    small = preset.launch_preset(rows, 12000, {**NO_KNOBS, "train_batch_size": 48})
    assert (small["grpo_train_responses"], small["grpo_mini_responses"]) == (48, 4)


def test_a_gpu_below_every_row_is_refused_saying_what_to_fix() -> None:
    with pytest.raises(ValueError, match="no row for a GPU of 8000 MiB.*min_memory_mib 0"):
        preset.launch_preset(PRESETS[:2], 8000, NO_KNOBS)


@pytest.mark.parametrize("value", [True, False, "true", "True", "yes", "on", "1", "y", "t", 1, 0, "false", "no",
                                   "off", "0", "n", "maybe", "2", 1.0])
def test_an_offload_knob_reads_as_ansibles_bool_filter_reads_it(value: Any) -> None:
    from ansible.module_utils.parsing.convert_bool import boolean

    assert preset.ansible_bool(value) is boolean(value, strict=False)


def test_the_renderer_gives_the_template_the_rules_sizes() -> None:
    values = render.variables({"gpu_memory_mib": 16384, "launch_train_batch_size": 0, "launch_param_offload": "0"})
    want = preset.launch_preset(PRESETS, 16384, {**NO_KNOBS, "param_offload": "0"})
    assert {key: values[f"launch_{key}"] for key in (*preset.SIZES, *preset.OFFLOADS)} == {
        key: want[key] for key in (*preset.SIZES, *preset.OFFLOADS)}
    assert values["launch_param_offload"] is False  # "0" is false to Ansible, not "from the preset"
    run = values["launch_run"]["lines"]
    n = int(values["launch_grpo_rollout_n"])
    assert f"data.train_batch_size={want['train_batch_size']}" in run["ppo"]
    assert f"data.train_batch_size={want['grpo_train_responses'] // n}" in run["grpo"]
    assert "actor_rollout_ref.ref.fsdp_config.param_offload=False" in run["common"]


PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_tasks: "{{ repo }}/roles/launch/tasks/preset.yml"
    - ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ launch_effective | to_json }}"
"""


@needs_ansible
def test_ansible_sizes_the_run_with_the_same_function(tmp_path: Path) -> None:
    out = tmp_path / "effective.json"
    knobs = {"launch_train_batch_size": 64, "launch_ppo_mini_batch_size": 0, "launch_micro_batch_size": 0,
             "launch_param_offload": "0", "launch_actor_param_offload": "", "launch_optimizer_offload": "yes"}
    proc = run_playbook(tmp_path, PLAY, "-e", f"repo={REPO}", "-e", f"out={out}",
                        "-e", json.dumps({"launch_memory_presets": PRESETS, "fleet": {"memory_mib": 16384}, **knobs}),
                        env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    want = preset.launch_preset(PRESETS, 16384, {key[len("launch_"):]: value for key, value in knobs.items()})
    assert json.loads(out.read_text()) == want


COMPOSE_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.include_vars: "{{ repo }}/roles/launch/defaults/main.yml"
    - ansible.builtin.include_tasks: "{{ repo }}/roles/launch/tasks/preset.yml"
    - ansible.builtin.include_tasks: "{{ repo }}/roles/launch/tasks/compose.yml"
    - ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ launch_run | to_json }}"
"""


@needs_ansible
@pytest.mark.parametrize(("profile", "version"), [("pascal", "0.5.0"), ("volta_turing", "0.9.1")])
def test_ansible_composes_the_run_the_renderer_composes(tmp_path: Path, profile: str, version: str) -> None:
    """The launch role's composition (roles/launch/tasks/compose.yml) passes every knob the function
    reads, and what it gets back reaches the template intact: the same configuration as the renderer's,
    comments, quoting and a project name that needs quotes included."""
    out = tmp_path / "run.json"
    settings = {"preflight_gpu_profile": profile, "verl_version": version, "launch_project_name": "my project's runs",
                "launch_rollout": "vllm", "launch_grpo_rollout_n": 8}
    cluster = {"managed": True, "hosts": ["a", "b"], "head": "a", "nnodes": 2, "n_gpus_per_node": 4}
    proc = run_playbook(tmp_path, COMPOSE_PLAY, "-e", f"repo={REPO}", "-e", f"out={out}",
                        "-e", f"@{REPO / 'inventory/group_vars/all/settings.yml'}", "-e", f"verl_pascal_root={REPO}",
                        "-e", json.dumps({"fleet": {**cluster, "memory_mib": 16384}, **settings}),
                        env={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    want = render.variables({"gpu_memory_mib": 16384, "launch_cluster": cluster, **settings})["launch_run"]
    assert json.loads(out.read_text()) == want
    assert "'trainer.project_name=my project'\"'\"'s runs'" in want["lines"]["common"]
