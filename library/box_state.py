#!/usr/bin/python
"""Ansible module: read, in one call, everything a role would look at on a box."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: box_state
short_description: Read a role's whole state on a box at once, so that its changing tasks run only where needed
description:
  - One round trip instead of one per C(stat), C(slurp), C(command) and unchanged C(file), C(copy) or
    C(template) task. The role's changing tasks then run only for what is not as wanted (C(when) on an entry
    of RV(differs)), and so report, in check and diff mode too, what a real run changes.
  - A C(files) entry is as wanted when the task that manages it would change nothing (module_utils/box_state.py
    gives the rules per C(state)).
  - Reads only; safe in check mode. The logic lives in C(module_utils/box_state.py) and
    C(module_utils/env_probe.py).
options:
  files:
    description: Name to what the changing task leaves there (path, state, content or sha256, src, owner, group, mode).
    type: dict
    default: {}
  read:
    description: Name to a small file whose text to return (null when there is none).
    type: dict
    default: {}
  glob:
    description: Name to a glob pattern whose matches to return.
    type: dict
    default: {}
  sha256:
    description: Name to a file whose sha256 to return (null when there is no regular file).
    type: dict
    default: {}
  users:
    description: Users whose passwd entry to return (null when there is none).
    type: list
    elements: str
    default: []
  digests:
    description: Name to a tree (path, exclude) to return one sha256 of, over its files' names and contents.
    type: dict
    default: {}
  commands:
    description: Name to a read-only command (argv, user, timeout) whose rc, stdout and stderr to return.
    type: dict
    default: {}
  python:
    description:
      - Name to an env (python, user, versions, pins, intact, editable) to ask, with its own Python, what it
        holds (module_utils/env_probe.py).
    type: dict
    default: {}
  links:
    description: Name to a tree of links (src, dest, dirs) to plan as the C(link_tree) module would.
    type: dict
    default: {}
author: verl-pascal
"""

EXAMPLES = r"""
- name: Read the toolkit's state
  box_state:
    files:
      profile: {path: /etc/profile.d/verl-pascal-cuda.sh, content: "{{ lookup('template', 'cuda.sh.j2') }}",
                owner: root, group: root, mode: "0644"}
    read:
      version_json: /usr/local/cuda-11.8/version.json
  register: state

- name: Put CUDA on PATH for login shells
  ansible.builtin.template: {src: cuda.sh.j2, dest: /etc/profile.d/verl-pascal-cuda.sh, mode: "0644"}
  when: "'profile' in state.differs"
"""

RETURN = r"""
differs:
  description: The names of the files entries that are not as wanted.
  returned: always
  type: list
  elements: str
why:
  description: Name to why it is not as wanted.
  returned: always
  type: dict
read:
  description: Name to the file's text, or null.
  returned: always
  type: dict
sha256:
  description: Name to the file's sha256, or null.
  returned: always
  type: dict
glob:
  description: Name to the sorted matches.
  returned: always
  type: dict
users:
  description: Name to {uid, gid, group, home, shell}, or null.
  returned: always
  type: dict
digests:
  description: Name to the tree's sha256, or null when it is not a directory.
  returned: always
  type: dict
commands:
  description: Name to {rc, stdout, stderr}; rc is null when the command could not start.
  returned: always
  type: dict
python:
  description: Name to the env probe's answer, or {error} when the env's Python does not answer.
  returned: always
  type: dict
links:
  description: Name to {actions} (what link_tree would change; empty when nothing), or {error} when it would refuse.
  returned: always
  type: dict
"""

import inspect

from ansible.module_utils import env_probe
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.box_state import BoxStateError, inspect_box


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "dict", "default": {}},
            "read": {"type": "dict", "default": {}},
            "glob": {"type": "dict", "default": {}},
            "sha256": {"type": "dict", "default": {}},
            "users": {"type": "list", "elements": "str", "default": []},
            "digests": {"type": "dict", "default": {}},
            "commands": {"type": "dict", "default": {}},
            "python": {"type": "dict", "default": {}},
            "links": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        result = inspect_box(module.params, lambda: inspect.getsource(env_probe))
    except (BoxStateError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
