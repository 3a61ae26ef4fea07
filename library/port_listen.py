#!/usr/bin/python
"""Ansible module: listen on a port until enough peers connected (run it with async)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: port_listen
short_description: Listen on a port for a while and report who connected
description:
  - Binds O(address):O(port) and accepts connections until O(connections) arrived or O(timeout)
    seconds passed, closing each at once. Run it with C(async) and C(poll=0), let the other hosts
    connect (M(ansible.builtin.wait_for)), then collect it with M(ansible.builtin.async_status).
  - When another process holds the port, returns at once with RV(in_use) true.
  - Changes nothing; safe in check mode.
options:
  address:
    description: The address to bind, one this host has.
    type: str
    required: true
  port:
    description: The TCP port.
    type: int
    required: true
  connections:
    description: How many connections to wait for.
    type: int
    required: true
  timeout:
    description: Seconds to wait for them.
    type: int
    default: 30
author: verl-pascal
"""

EXAMPLES = r"""
- name: Listen on the head's GCS port
  port_listen:
    address: 10.0.0.2
    port: 6379
    connections: 2
  async: 60
  poll: 0
  register: listener
"""

RETURN = r"""
in_use:
  description: Another process held the port; nothing was opened.
  returned: always
  type: bool
  sample: false
peers:
  description: The address of each peer that connected.
  returned: always
  type: list
  elements: str
  sample: [10.0.0.3, 10.0.0.4]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.port_probe import listen


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "port": {"type": "int", "required": True},
            "connections": {"type": "int", "required": True},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = listen(p["address"], p["port"], p["connections"], p["timeout"])
    except OSError as exc:
        module.fail_json(msg="cannot listen on %s:%d: %s" % (p["address"], p["port"], exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
