#!/usr/bin/python
"""Ansible module: fail when the hosts of a play resolve to different stacks."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fleet_stack_check
short_description: Check every host of a play resolves to one stack (verl, torch, CUDA, Python)
description:
  - Compares each host's settings with the reference host's and fails, naming every host,
    setting and both values, when any differs.
  - Changes nothing; safe in check mode. Run it once per play (run_once).
options:
  stacks:
    description: Host name -> {setting -> value}, the same settings for every host.
    type: dict
    required: true
  reference:
    description: The host the others must match.
    type: str
    required: true
author: verl-pascal
"""

EXAMPLES = r"""
- name: Check the hosts agree on the stack
  fleet_stack_check:
    stacks:
      box-a: {verl_version: "0.5.0", torch_version: "2.6.0+cu118"}
      box-b: {verl_version: "0.6.1", torch_version: "2.6.0+cu118"}
    reference: box-a
  run_once: true
"""

RETURN = r"""
differences:
  description: One line per host and setting that differs from the reference host's.
  returned: always
  type: list
  elements: str
  sample: ["box-b: verl_version is '0.6.1', box-a has '0.5.0'"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.fleet import FleetError, differences, message


def main() -> None:
    module = AnsibleModule(
        argument_spec={"stacks": {"type": "dict", "required": True}, "reference": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    stacks, reference = module.params["stacks"], module.params["reference"]
    try:
        lines = differences(stacks, reference)
    except FleetError as exc:
        module.fail_json(msg=str(exc), differences=[])
    if lines:
        module.fail_json(msg=message(lines, reference, len(stacks)), differences=lines)
    module.exit_json(changed=False, differences=[])


if __name__ == "__main__":
    main()
