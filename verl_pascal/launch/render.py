"""Render the launch script template outside Ansible, from the same files.

Ansible renders templates/verl-ppo.sh.j2 on real boxes (the launch role);
benchmarks on a GPU host and the template's tests render the same file here,
with `quote` (shlex.quote, as Ansible's) and `bool` (Ansible's truthiness).
The values come from where the role takes them: the launch role's
defaults/main.yml, the lock and site settings in inventory/group_vars/all/,
the GPU-profile table and the verl release folders; the run's sizes and its
composed overrides come from the functions the role calls
(verl_pascal/launch/compose.py). Only what preflight's GPU facts give a box is
stated here (OUTSIDE_ANSIBLE).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Dict, Mapping

import jinja2

from verl_pascal import profiles, verl_releases
from verl_pascal.launch import compose
from verl_pascal.version_lock import Lock, LockError, load_lock, load_lock_file

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = str(REPO / "templates" / "verl-ppo.sh.j2")
LAUNCH_DEFAULTS = REPO / "roles" / "launch" / "defaults" / "main.yml"
GROUP_VARS = REPO / "inventory" / "group_vars" / "all"

#: What the launch role takes from preflight's GPU facts and Ansible itself:
#: one Tesla P40 unless the caller says otherwise.
OUTSIDE_ANSIBLE: Dict[str, Any] = {
    "ansible_managed": "Rendered by verl_pascal/launch/render.py",
    "launch_gpu_summary": "(rendered outside Ansible)",
    "preflight_gpu_profile": "pascal",
    "launch_min_compute_cap": "6.1",
    "inventory_hostname": "p40-box",
    # A box of its own: a cluster of one node (preflight's fleet_plan).
    "launch_cluster": {"managed": False, "hosts": ["p40-box"], "head": "p40-box", "nnodes": 1, "n_gpus_per_node": 1},
    "launch_ray_address": "",
    "gpu_memory_mib": 24576,
    "cuda_toolkit_path": "/usr/local/cuda",
    "model_repo": "model",
}

def ansible_bool(value: object) -> bool:
    """``value`` as Ansible's ``bool`` filter reads it."""
    return compose.ansible_bool(value)


def variables(overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """Every variable the template reads: the role's files, then OUTSIDE_ANSIBLE, then ``overrides``."""
    raw = {**load_lock([GROUP_VARS]), **load_lock_file(LAUNCH_DEFAULTS)}
    # Without Ansible's Templar: benchmarks render in the process that then runs torch.
    lock = Lock(raw, {**OUTSIDE_ANSIBLE, **overrides}, use_ansible=False)
    values: Dict[str, Any] = {}
    for name in lock.names():
        try:
            values[name] = lock.get(name)
        except LockError:  # needs Ansible's filters (launch_model_dir), or a fact: pass it, or the template fails
            pass
    # The role's calls (roles/launch/tasks/preset.yml and main.yml), the same functions: the run's sizes
    # and offloads for the GPU, then its composed configuration.
    effective = compose.launch_preset(values["launch_memory_presets"], values["gpu_memory_mib"],
                                      {key: values[f"launch_{key}"] for key in (*compose.SIZES, *compose.OFFLOADS)})
    for key in (*compose.SIZES, *compose.OFFLOADS):  # what preflight's host-memory estimate reads
        values[f"launch_{key}"] = effective[key]
    values["verl_pascal_gpu_profiles"] = {"profiles": profiles.rows()}
    if "verl_releases" not in values:  # the folders that validate; ReleaseError if verl_version's does not
        values["verl_releases"] = verl_releases.available(needed=[str(values["verl_version"])])
    values["launch_run"] = compose.launch_run(
        effective, values["verl_pascal_gpu_profiles"]["profiles"][values["preflight_gpu_profile"]],
        values["verl_releases"].get(str(values["verl_version"])) or {}, values["launch_cluster"],
        {key: values[f"launch_{key}"] for key in compose.KNOBS})
    if "launch_host_memory_need_mib" not in overrides:  # preflight's estimate, as its module makes it
        values["launch_host_memory_need_mib"] = host_memory_needs(values)
    return values


def host_memory_needs(values: Mapping[str, Any]) -> Dict[str, int]:
    """The host memory a run needs at its peak, MiB by algorithm, as preflight's host_memory_check
    estimates it ({} for a release without a measured figure)."""
    from verl_pascal.module_utils import host_memory

    version = str(values["verl_version"])
    releases = host_memory.measured_releases(values["verl_releases"])
    if releases.get(version) is None:
        return {}
    rollout_owner = (values["verl_releases"].get(version) or {}).get("hf_rollout", "verl")
    offload = host_memory.Offload(ansible_bool(values["launch_param_offload"]),
                                  ansible_bool(values["launch_actor_param_offload"]) and rollout_owner != "verl",
                                  ansible_bool(values["launch_optimizer_offload"]))
    return {algo: round(host_memory.need_gib(float(releases[version] or 0), int(values["model_parameters"]),
                                             offload, algo) * host_memory.GIB / host_memory.MIB)
            for algo in host_memory.ALGOS}


def render(overrides: Mapping[str, Any], template: str = TEMPLATE) -> str:
    # The launch script includes templates/training.env.j2, as Ansible finds it beside the template.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True,
                             loader=jinja2.FileSystemLoader(os.path.dirname(template)))
    env.filters["quote"] = lambda s: shlex.quote(str(s))
    env.filters["bool"] = ansible_bool
    with open(template, encoding="utf-8") as f:
        return env.from_string(f.read()).render(**variables(overrides))


def write(path: str, overrides: Mapping[str, Any]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(overrides))
    os.chmod(path, 0o755)
    return path
