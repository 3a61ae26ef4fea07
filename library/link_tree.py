#!/usr/bin/python
"""Ansible module: link a tree into another with cp -lP semantics."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: link_tree
short_description: Hard-link a directory tree into another (cp -lP semantics)
description:
  - Regular files become hard links, symbolic links are re-created with the same
    target, directories are created. Nothing is copied.
  - With I(state=absent), removes exactly the entries that still link to the source.
  - Idempotent; supports check mode and diff mode.
options:
  src:
    description: Root of the source tree.
    type: path
    required: true
  dest:
    description:
      - Root of the destination tree.
      - Every directory a file is linked into must be on the filesystem of I(src),
        symlinks followed (CUDA's C(lib64) is a symlink into C(targets/)); this is checked
        for all of them before the first link is made, so a refusal changes nothing.
    type: path
    required: true
  dirs:
    description:
      - Directories of I(src) to link, each mapped to a directory of I(dest)
        (which may be a symlink to a directory).
    type: dict
    required: true
  state:
    description: Whether the links should exist.
    type: str
    choices: [present, absent]
    default: present
author: verl-pascal
"""

EXAMPLES = r"""
- name: Link cuDNN into the CUDA toolkit
  link_tree:
    src: /usr/local/cudnn/cudnn-linux-x86_64-8.9.7.29_cuda11-archive
    dest: /usr/local/cuda-11.8
    dirs: {include: include, lib: lib64}
"""

RETURN = r"""
actions:
  description: What was (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
  sample: ["hard-link /usr/local/cuda-11.8/lib/libcudnn.so.8.9.7 -> /usr/local/cudnn/.../lib/libcudnn.so.8.9.7"]
"""

from typing import List

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.linktree import Action, LinkTreeError, apply, plan


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "dirs": {"type": "dict", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
        },
        supports_check_mode=True,
    )
    p = module.params
    done: List[Action] = []
    try:
        actions = plan(p["state"], p["src"], p["dest"], {str(k): str(v) for k, v in p["dirs"].items()})
        if actions and not module.check_mode:
            apply(actions, done)
    except (LinkTreeError, OSError) as exc:
        # A plan is refused before anything changes; an error while applying
        # it (disk full, permissions) says what was already done.
        module.fail_json(msg=str(exc), changed=bool(done), actions=[a.describe() for a in done])
    described = [a.describe() for a in actions]
    result = {"changed": bool(actions), "actions": described}
    if module._diff and actions:
        result["diff"] = {
            "before_header": p["dest"],
            "after_header": p["dest"],
            "before": "",
            "after": "\n".join(described) + "\n",
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
