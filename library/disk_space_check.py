#!/usr/bin/python
"""Ansible module: fail early when a filesystem is too small for what goes on it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: disk_space_check
short_description: Check free disk space for a set of paths, summed per filesystem
description:
  - Each requirement names a path (which may not exist yet) and a size in bytes.
  - The nearest existing parent of each path decides its filesystem; sizes on one
    filesystem add up.
  - Fails, naming every filesystem that is short, when free space is not enough.
  - Changes nothing; safe in check mode.
options:
  requirements:
    description: What needs space and where.
    type: list
    elements: dict
    required: true
    suboptions:
      what:
        description: Label shown in the report.
        type: str
        required: true
      path:
        description: Where the data will go.
        type: path
        required: true
      bytes:
        description: Bytes needed.
        type: int
        required: true
      skip_if_exists:
        description: Skip the entry when this path exists.
        type: path
author: verl-pascal
"""

EXAMPLES = r"""
- name: Check space for the CUDA toolkit
  disk_space_check:
    requirements:
      - what: CUDA toolkit
        path: /usr/local/cuda-11.8
        bytes: 8000000000
"""

RETURN = r"""
filesystems:
  description: One entry per filesystem checked.
  returned: always
  type: list
  elements: dict
  sample: [{"probe": "/usr/local", "free_bytes": 1, "needed_bytes": 2, "ok": false}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.disk_space import Requirement, plan, shortfall_message


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "requirements": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "what": {"type": "str", "required": True},
                    "path": {"type": "path", "required": True},
                    "bytes": {"type": "int", "required": True},
                    "skip_if_exists": {"type": "path"},
                },
            }
        },
        supports_check_mode=True,
    )
    reqs = [Requirement(**r) for r in module.params["requirements"]]
    try:
        filesystems = plan(reqs)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    report = [
        {
            "probe": fs.probe,
            "free_bytes": fs.free_bytes,
            "needed_bytes": fs.needed_bytes,
            "ok": fs.ok,
            "what": [r.what for r in fs.items],
        }
        for fs in filesystems
    ]
    message = shortfall_message(filesystems)
    if message:
        module.fail_json(msg=message, filesystems=report)
    module.exit_json(changed=False, filesystems=report)


if __name__ == "__main__":
    main()
