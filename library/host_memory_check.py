#!/usr/bin/python
"""Ansible module: the host memory a training run needs at its peak, against what the box has."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_memory_check
short_description: Estimate a training run's peak host memory and fail early when the box is too small
description:
  - Reads MemTotal from /proc/meminfo on the target.
  - Estimates the run's peak host memory for each algorithm (PPO, GRPO) from the release's measured
    processes and the model copies the launch preset offloads (module_utils/host_memory.py).
  - With I(enforce), fails before anything changes when the run of I(algo) does not fit, naming what
    fits instead (an older release, GRPO, more memory).
  - A release without a measured figure is not judged (C(measured) false).
  - Changes nothing; safe in check mode.
options:
  version:
    description: The verl release the run uses.
    type: str
    required: true
  releases:
    description:
      - Every release's folder (verl_releases), by version; its C(host_memory_gib) is the measured processes'
        share in GiB, absent where not measured.
    type: dict
    required: true
  model_parameters:
    description: The model's parameter count.
    type: int
    required: true
  param_offload:
    description: The critic's and the reference's parameters are offloaded.
    type: bool
    required: true
  actor_param_offload:
    description: The actor's parameters are offloaded (false where the rollout needs them on the GPU).
    type: bool
    required: true
  optimizer_offload:
    description: The optimizers' states are offloaded.
    type: bool
    required: true
  algo:
    description: The algorithm judged with I(enforce).
    type: str
    choices: [ppo, grpo]
    default: ppo
  enforce:
    description: Fail when the run does not fit.
    type: bool
    default: true
  host:
    description: The box's name, for the message.
    type: str
    default: this box
author: verl-pascal
"""

EXAMPLES = r"""
- name: Check the box holds a PPO run of verl 0.9.1
  host_memory_check:
    version: "0.9.1"
    releases: {"0.9.1": {"host_memory_gib": 12.4}, "0.5.0": {"host_memory_gib": 6.8}}
    model_parameters: 494032768
    param_offload: true
    actor_param_offload: false
    optimizer_offload: true
"""

RETURN = r"""
total_mib:
  description: The box's memory (MemTotal).
  returned: always
  type: int
limit_mib:
  description: What a run may take at its peak, under Ray's memory monitor, less the system's share.
  returned: always
  type: int
need_mib:
  description: The run's estimated peak host memory per algorithm (absent when not measured).
  returned: always
  type: dict
  sample: {"ppo": 32669, "grpo": 24987}
measured:
  description: Whether the release has a measured figure to judge by.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host_memory import (ALGOS, GIB, MIB, Offload, limit_gib, measured_releases, meminfo_kib,
                                              need_gib, shortfall)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "version": {"type": "str", "required": True},
            "releases": {"type": "dict", "required": True},
            "model_parameters": {"type": "int", "required": True},
            "param_offload": {"type": "bool", "required": True},
            "actor_param_offload": {"type": "bool", "required": True},
            "optimizer_offload": {"type": "bool", "required": True},
            "algo": {"type": "str", "choices": list(ALGOS), "default": "ppo"},
            "enforce": {"type": "bool", "default": True},
            "host": {"type": "str", "default": "this box"},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            total_gib = meminfo_kib(f.read())["MemTotal"] * 1024 / GIB
    except (OSError, KeyError) as exc:
        module.fail_json(msg=f"cannot read the box's memory from /proc/meminfo: {exc}")
    offload = Offload(p["param_offload"], p["actor_param_offload"], p["optimizer_offload"])
    try:
        releases = measured_releases(p["releases"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    processes = releases.get(p["version"])
    needs = {} if processes is None else {
        algo: round(need_gib(processes, p["model_parameters"], offload, algo) * GIB / MIB) for algo in ALGOS}
    result = {"changed": False, "total_mib": round(total_gib * GIB / MIB),
              "limit_mib": round(limit_gib(total_gib) * GIB / MIB), "need_mib": needs,
              "measured": processes is not None}
    message = shortfall(p["host"], p["version"], releases, p["model_parameters"],
                        offload, p["algo"], total_gib) if p["enforce"] else None
    if message:
        module.fail_json(msg=message, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
