#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Ansible module: build the box-side wheel of verl_pascal on the controller.

Thin wrapper: the logic lives in module_utils/box_wheel.py (unit-tested).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: box_wheel
short_description: Build the reproducible wheel of verl_pascal's box-side subpackages
description:
  - Writes C(verl_pascal_box-<version>-py3-none-any.whl) into O(dest) from the O(packages) of the
    checkout at O(src), with only the standard library (no setuptools, no network).
  - The same sources give the same bytes; the version is the project's version (from
    C(pyproject.toml)) with the sources' hash as its local label, so a changed file gives a new
    version that pip installs, and an unchanged one is already installed.
  - Meant for the controller (C(delegate_to=localhost)); the roles copy the wheel to the box and
    install it with pip.
  - Builds in check mode too (a file on the controller, never on a box) and reports a change only
    when it wrote a new file.
options:
  src:
    description: The verl-pascal checkout (holds C(pyproject.toml) and the packages).
    type: path
    required: true
  packages:
    description: Dotted packages to put in the wheel, each with its subfolders.
    type: list
    elements: str
    required: true
  dest:
    description: Folder the wheel is written to (created when missing).
    type: path
    required: true
attributes:
  check_mode:
    support: full
    description: Builds the same in check mode; it writes only on the controller.
  diff_mode:
    support: none
author: verl-pascal
"""

EXAMPLES = r"""
- name: Build the box-side wheel
  box_wheel:
    src: "{{ verl_pascal_root }}"
    packages: [verl_pascal.data, verl_pascal.models, verl_pascal.p40_rules]
    dest: "{{ verl_pascal_root }}/.cache/box-wheel"
  delegate_to: localhost
  register: launch_box_wheel
"""

RETURN = r"""
path:
  description: The wheel on the controller.
  returned: success
  type: str
  sample: /srv/verl-pascal/.cache/box-wheel/verl_pascal_box-0.1.0+1a2b3c4d5e6f-py3-none-any.whl
filename:
  description: The wheel's file name.
  returned: success
  type: str
  sample: verl_pascal_box-0.1.0+1a2b3c4d5e6f-py3-none-any.whl
version:
  description: The wheel's version.
  returned: success
  type: str
  sample: 0.1.0+1a2b3c4d5e6f
sha256:
  description: sha256 of the wheel.
  returned: success
  type: str
files:
  description: The package files in the wheel.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.box_wheel import BoxWheelError, build


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "packages": {"type": "list", "elements": "str", "required": True},
            "dest": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        built = build(params["src"], params["packages"], params["dest"])
    except (BoxWheelError, OSError) as error:
        module.fail_json(msg="box_wheel: {0}".format(error))
    module.exit_json(**built._asdict())


if __name__ == "__main__":
    main()
