#!/usr/bin/python
"""Ansible module: the cluster a host belongs to, and what verl trains with across it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_plan
short_description: Work out a host's cluster, the GPUs verl uses per node, and the weakest GPU
description:
  - A cluster is the host of the C(ray_head) group and the hosts of C(ray_workers); a host in
    neither group is a box of its own (a cluster of one, whose runs start their own Ray).
  - Fails, saying what to change, when the groups are inconsistent, when the play leaves out a
    node of the host's cluster, or when the nodes' GPU counts differ and O(launch_gpus) does not
    pick a count every node has (verl's pool is C([n_gpus_per_node] * nnodes)).
  - The profile and the memory are the weakest GPU's, so every node runs one patch and one preset.
  - Changes nothing; safe in check mode.
options:
  host:
    description: The host to plan for (inventory_hostname).
    type: str
    required: true
  heads:
    description: The hosts of the head group.
    type: list
    elements: str
    required: true
  workers:
    description: The hosts of the worker group.
    type: list
    elements: str
    required: true
  play_hosts:
    description: The hosts of the play.
    type: list
    elements: str
    required: true
  nodes:
    description:
      - Host -> C({gpus, profile}) for the hosts of the play, C(gpus) being the host's
        C(nvidia_gpus) facts and C(profile) its GPU profile.
    type: dict
    required: true
  launch_gpus:
    description: GPUs verl uses on each node; 0 uses all, which must then be equal on every node.
    type: int
    default: 0
author: verl-pascal
"""

EXAMPLES = r"""
- name: Plan the cluster
  fleet_plan:
    host: "{{ inventory_hostname }}"
    heads: "{{ groups['ray_head'] | default([]) }}"
    workers: "{{ groups['ray_workers'] | default([]) }}"
    play_hosts: "{{ ansible_play_hosts }}"
    nodes: {p40-box: {gpus: [{memory_total_mib: 24576, compute_cap: "6.1"}], profile: pascal}}
"""

RETURN = r"""
ansible_facts:
  description: The plan, as the fact C(fleet).
  returned: success
  type: dict
  contains:
    fleet:
      description: >-
        hosts (head first), head, managed (the host is in a cluster group), nnodes,
        n_gpus_per_node, gpus_total, gpus_used, memory_mib, compute_cap, profile, weakest (a host).
      type: dict
      sample: {hosts: [head, w1], head: head, managed: true, nnodes: 2, n_gpus_per_node: 1,
               gpus_total: 3, gpus_used: 2, memory_mib: 24576, compute_cap: "6.1", profile: pascal,
               weakest: head}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleet import FleetError, members, plan


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "heads": {"type": "list", "elements": "str", "required": True},
            "workers": {"type": "list", "elements": "str", "required": True},
            "play_hosts": {"type": "list", "elements": "str", "required": True},
            "nodes": {"type": "dict", "required": True},
            "launch_gpus": {"type": "int", "default": 0},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["launch_gpus"] < 0:
        module.fail_json(msg="launch_gpus must be 0 (all of a node's GPUs) or more, not %d" % p["launch_gpus"])
    try:
        order = members(p["host"], p["heads"], p["workers"], p["play_hosts"])
        fleet = plan(p["nodes"], order, p["launch_gpus"])
    except FleetError as exc:
        module.fail_json(msg=str(exc))
    fleet["managed"] = p["host"] in p["heads"] or p["host"] in p["workers"]
    module.exit_json(changed=False, ansible_facts={"fleet": fleet})


if __name__ == "__main__":
    main()
