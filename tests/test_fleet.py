"""The fleet check: every host of a play must resolve to one stack before anything changes.

The logic (module_utils/fleet.py) on its own, then the preflight role's own
task (roles/preflight/tasks/fleet.yml, with the role's vars) on a play of two
local hosts whose inventory gives them the same or different settings.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest
from conftest import REPO_ROOT, needs_ansible, run_playbook

from verl_pascal.module_utils.fleet import FleetError, differences, message

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
    return run_playbook(tmp_path, "- hosts: all\n  gather_facts: false\n  tasks:\n"
                        "    - ansible.builtin.include_role:\n        name: preflight\n        tasks_from: fleet.yml\n",
                        inventory=tmp_path / "inventory.json", timeout=300)


@needs_ansible
def test_the_role_passes_a_fleet_on_one_stack(tmp_path: Path) -> None:
    proc = play(tmp_path, {"box-a": STACK, "box-b": STACK})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_ansible
def test_the_role_stops_a_host_on_another_verl_naming_it(tmp_path: Path) -> None:
    proc = play(tmp_path, {"box-a": STACK, "box-b": {**STACK, "verl_version": "0.6.1"}})
    assert proc.returncode != 0
    assert "box-b: verl_version is '0.6.1', box-a has '0.5.0'" in proc.stdout


# --------------------------------------------------------------------------
# The cluster: its nodes, the GPUs verl uses on each, the weakest GPU
# --------------------------------------------------------------------------

from verl_pascal.module_utils.fleet import members, plan  # noqa: E402


def gpus(count: int, memory: int = 24576, cap: str = "6.1") -> list:
    return [{"memory_total_mib": memory, "compute_cap": cap} for _ in range(count)]


def test_a_box_in_no_cluster_group_is_a_cluster_of_one() -> None:
    assert members("p40-box", [], [], ["p40-box"]) == ["p40-box"]
    assert members("other", ["head"], ["w1"], ["head", "w1", "other"]) == ["other"]
    fleet = plan({"p40-box": {"gpus": gpus(4), "profile": "pascal"}}, ["p40-box"])
    assert (fleet["nnodes"], fleet["n_gpus_per_node"], fleet["gpus_used"]) == (1, 4, 4)


def test_a_cluster_is_its_head_then_its_workers() -> None:
    assert members("w2", ["head"], ["w1", "w2"], ["w2", "w1", "head"]) == ["head", "w1", "w2"]
    assert members("head", ["head"], [], ["head"]) == ["head"]


@pytest.mark.parametrize("heads, workers, play, needle", [
    (["a", "b"], ["w"], ["a", "b", "w"], "ray_head has 2 hosts (a, b): a cluster has exactly one head"),
    ([], ["w"], ["w"], "ray_workers has hosts (w) but ray_head has none"),
    (["a"], ["a"], ["a"], "a is in both ray_head and ray_workers"),
    (["a"], ["w1", "w2"], ["a", "w1"], "the play leaves out w2 of the cluster (a, w1, w2)"),
])
def test_inconsistent_groups_and_a_partial_play_are_refused(heads, workers, play, needle) -> None:
    with pytest.raises(FleetError, match=re.escape(needle)):
        members(play[0], heads, workers, play)


def test_unequal_gpu_counts_are_refused_with_the_reason_and_the_fix() -> None:
    nodes = {"head": {"gpus": gpus(1), "profile": "pascal"}, "w1": {"gpus": gpus(1), "profile": "pascal"},
             "w2": {"gpus": gpus(2), "profile": "pascal"}}
    with pytest.raises(FleetError) as err:
        plan(nodes, ["head", "w1", "w2"])
    assert "(head 1, w1 1, w2 2)" in str(err.value) and "[n_gpus_per_node] * nnodes" in str(err.value)
    assert "Set launch_gpus to the number to use on each node, 1 or less" in str(err.value)
    fleet = plan(nodes, ["head", "w1", "w2"], launch_gpus=1)
    assert (fleet["nnodes"], fleet["n_gpus_per_node"], fleet["gpus_total"], fleet["gpus_used"]) == (3, 1, 4, 3)


def test_launch_gpus_beyond_a_nodes_count_names_the_node() -> None:
    nodes = {"head": {"gpus": gpus(2), "profile": "pascal"}, "w1": {"gpus": gpus(1), "profile": "pascal"}}
    with pytest.raises(FleetError, match=re.escape("launch_gpus is 2, but w1 has fewer GPUs (head 2, w1 1)")):
        plan(nodes, ["head", "w1"], launch_gpus=2)


def test_the_profile_and_the_memory_are_the_weakest_gpus() -> None:
    nodes = {"head": {"gpus": gpus(1, 32768, "7.0"), "profile": "volta_turing"},
             "w1": {"gpus": gpus(1, 24576, "6.1"), "profile": "pascal"},
             "w2": {"gpus": [{"memory_total_mib": 16384, "compute_cap": "7.5"}], "profile": "volta_turing"}}
    fleet = plan(nodes, ["head", "w1", "w2"])
    assert (fleet["profile"], fleet["compute_cap"], fleet["weakest"], fleet["memory_mib"]) == ("pascal", "6.1", "w1", 16384)
    assert fleet["head"] == "head" and fleet["hosts"] == ["head", "w1", "w2"]


def test_capabilities_compare_as_numbers_not_text() -> None:
    nodes = {"a": {"gpus": gpus(1, cap="10.0"), "profile": "native"}, "b": {"gpus": gpus(1, cap="9.0"), "profile": "native9"}}
    assert plan(nodes, ["a", "b"])["weakest"] == "b"


def test_a_node_without_gpu_facts_is_named() -> None:
    with pytest.raises(FleetError, match="no GPU facts for w1"):
        plan({"head": {"gpus": gpus(1), "profile": "pascal"}, "w1": {"gpus": [], "profile": "pascal"}}, ["head", "w1"])


# --------------------------------------------------------------------------
# The preflight role on a cluster of three local hosts: the plan and the reach check
# --------------------------------------------------------------------------

import socket  # noqa: E402

import yaml  # noqa: E402
from test_preflight_role import standin_torch_lock  # noqa: E402

STANDIN_SMI = REPO_ROOT / "scripts" / "standins" / "nvidia-smi"
CLUSTER_PLAY = """
- hosts: all
  gather_facts: true
  gather_subset: [min, network]
  tasks:
    - ansible.builtin.include_role:
        name: preflight
    - ansible.builtin.copy:
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0600"
        content: "{{ {'fleet': fleet, 'address': preflight_node_address | default(''),
                      'profile': preflight_gpu_profile} | to_json }}"
      check_mode: false
"""


def cluster_preflight(tmp_path: Path, gpus: Dict[str, int], gcs: int, *limit: str,
                      **settings: object) -> tuple[subprocess.CompletedProcess, Dict[str, dict]]:
    """Preflight on head, w1, w2 (all this machine, on loopback), each with a stand-in nvidia-smi
    listing its number of P40s."""
    group_vars: Dict[str, object] = {}
    for name in ("versions.yml", "settings.yml"):
        group_vars.update(yaml.safe_load((REPO_ROOT / "inventory/group_vars/all" / name).read_text()))
    ports = {**group_vars["ray_cluster_ports"], **settings.pop("ray_cluster_ports", {}), "gcs": gcs}  # type: ignore[dict-item]
    group_vars.update(fleet_interface="lo", pytorch_lock_dir=str(standin_torch_lock(tmp_path)),
                      ray_cluster_ports=ports,
                      ray_cluster_reach_timeout=3, ansible_connection="local",
                      # the host-memory check judges a model of a million parameters: this machine has
                      # less memory than the 0.5B reference job needs (tests/test_preflight_role.py)
                      model_parameters=1_000_000,
                      ansible_python_interpreter=sys.executable, out=str(tmp_path), **settings)
    hosts = {}
    for host, count in gpus.items():
        smi = tmp_path / f"nvidia-smi-{host}"
        smi.write_text(f"#!/bin/sh\nNVIDIA_SMI_STANDIN_GPUS={count} exec {STANDIN_SMI} \"$@\"\n")
        smi.chmod(0o755)
        hosts[host] = {"preflight_nvidia_smi": str(smi)}
    inventory = {"all": {"vars": group_vars, "children": {
        "ray_head": {"hosts": {"head": hosts["head"]}},
        "ray_workers": {"hosts": {h: v for h, v in hosts.items() if h != "head"}}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    proc = run_playbook(tmp_path, CLUSTER_PLAY, *(["-l", ",".join(limit)] if limit else []),
                        env={"ANSIBLE_CONFIG": str(REPO_ROOT / "ansible.cfg")}, inventory=tmp_path / "inventory.json",
                        timeout=300)
    facts = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json") if p.stem in gpus}
    return proc, facts


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


UNEQUAL = {"head": 1, "w1": 1, "w2": 2}


@needs_ansible
def test_preflight_refuses_unequal_gpu_counts_before_any_change(tmp_path: Path) -> None:
    proc, facts = cluster_preflight(tmp_path, UNEQUAL, free_port())
    assert proc.returncode != 0 and facts == {}
    assert "different numbers of GPUs (head 1, w1 1, w2 2)" in proc.stdout


@needs_ansible
def test_preflight_plans_the_cluster_and_every_worker_reaches_the_heads_port(tmp_path: Path) -> None:
    proc, facts = cluster_preflight(tmp_path, UNEQUAL, free_port(), launch_gpus=1)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for host in UNEQUAL:
        fleet = facts[host]["fleet"]
        assert (fleet["hosts"], fleet["head"], fleet["managed"]) == (["head", "w1", "w2"], "head", True)
        assert (fleet["nnodes"], fleet["n_gpus_per_node"], fleet["gpus_total"]) == (3, 1, 4)
        assert facts[host]["address"] == "127.0.0.1" and facts[host]["profile"] == "pascal"


@needs_ansible
def test_preflight_names_the_workers_that_cannot_reach_the_heads_port(tmp_path: Path) -> None:
    """Negative control of the reach check: something holds the port and never answers."""
    with socket.socket() as deaf:
        deaf.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = deaf.getsockname()[1]
        proc, facts = cluster_preflight(tmp_path, UNEQUAL, port, launch_gpus=1)
    assert proc.returncode != 0 and facts == {}
    assert f"w1, w2 cannot reach the head head at 127.0.0.1:{port}" in " ".join(proc.stdout.split())


@needs_ansible
def test_preflight_refuses_a_play_that_leaves_out_a_node(tmp_path: Path) -> None:
    proc, facts = cluster_preflight(tmp_path, UNEQUAL, free_port(), "head", "w1", launch_gpus=1)
    assert proc.returncode != 0 and facts == {}
    assert "the play leaves out w2 of the cluster (head, w1, w2)" in proc.stdout


@needs_ansible
def test_preflight_refuses_a_kernel_port_range_outside_the_opened_one(tmp_path: Path) -> None:
    """torch.distributed listens on the kernel's ephemeral ports: a documented range that misses them
    would leave runs failing behind a firewall opened as documented."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    proc, facts = cluster_preflight(tmp_path, UNEQUAL, free_port(), launch_gpus=1,
                                    ray_cluster_ports={"distributed_min": low + 1, "distributed_max": high})
    assert proc.returncode != 0 and facts == {}
    assert f"kernel gives ports {low}-{high}" in " ".join(proc.stdout.split())
