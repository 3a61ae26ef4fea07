#!/usr/bin/python
"""Ansible module: the URL of one distribution file on pip's package index (nothing is built)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pip_index_file
short_description: Find the URL of an exact distribution file on a package index's simple API
description:
  - Reads the project page C(<index>/<normalized name>/) of the package index's simple API
    (PEP 503 HTML or PEP 691 JSON) and returns the absolute URL of the file named I(filename).
  - Unlike C(pip download), it never builds or opens the file, so no C(setup.py) runs before
    the caller has checked the file's sha256. Download the URL with a sha256-checking fetch.
  - Without I(index_url), the index is the one C(I(python) -m pip download) would use (pip's
    configuration files, C(PIP_INDEX_URL), and its extra indexes, looked in after it).
  - Read-only; supports check mode (it does the same lookup).
options:
  python:
    description:
      - Interpreter whose pip is asked for its index (and extra indexes).
      - Ignored when I(index_url) is set.
    type: str
  index_url:
    description: The simple API's root (the value of pip's C(--index-url)); only this index is read.
    type: str
  name:
    description: Project name (normalized as PEP 503 says for the page's URL).
    type: str
    required: true
  filename:
    description: The exact file name, for example C(verl-0.5.0.tar.gz).
    type: str
    required: true
  sha256:
    description:
      - The sha256 the lock expects. When the index lists another one for the file, the module
        fails before anything is downloaded. A matching hash on the page proves nothing; check the
        downloaded file.
    type: str
  timeout:
    description: Seconds to wait for the index (and for pip to answer).
    type: int
    default: 30
notes:
  - The returned I(url) keeps the user and password of an index URL that has them, when the
    file is on the same host.
author: verl-pascal
"""

EXAMPLES = r"""
- name: Find verl's sdist on pip's index
  pip_index_file:
    python: /opt/miniforge3/envs/verl-p40/bin/python
    name: verl
    filename: verl-0.5.0.tar.gz
    sha256: 0aabeab59459f947c826a3cfef35836e52691e50083f7611a4ef28a504796409
  register: verl_sdist_on_index
"""

RETURN = r"""
url:
  description: Absolute URL of the file.
  returned: success
  type: str
index_url:
  description: The index the file was found on (password hidden).
  returned: success
  type: str
project_url:
  description: The project page that lists the file (password hidden).
  returned: success
  type: str
index_sha256:
  description: The sha256 the index lists for the file, if any (equal to I(sha256) when both are set).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pip_index import PipIndexError, find_file, fetch_page, pip_index_config, redact


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "str"},
            "index_url": {"type": "str"},
            "name": {"type": "str", "required": True},
            "filename": {"type": "str", "required": True},
            "sha256": {"type": "str"},
            "timeout": {"type": "int", "default": 30},
        },
        required_one_of=[["python", "index_url"]],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["index_url"]:
            indexes = [p["index_url"]]
        else:
            indexes = pip_index_config(p["python"], timeout=p["timeout"]).urls
        found = find_file(indexes, p["name"], p["filename"], p["sha256"],
                          fetch=lambda url: fetch_page(url, timeout=p["timeout"]))
    except PipIndexError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, url=found.url, index_url=redact(found.index_url),
                     project_url=redact(found.project_url), index_sha256=found.sha256 or "")


if __name__ == "__main__":
    main()
