"""The GPU-profile table (gpu_profiles.yml beside this file), for Python.

Ansible reads the same file (inventory/group_vars/all/settings.yml points
``verl_pascal_gpu_profiles`` at it); this module is how the package's own
commands and the tests read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

TABLE = Path(__file__).resolve().parent / "gpu_profiles.yml"


def rows() -> Dict[str, Dict[str, Any]]:
    """Profile name -> its row (capability, patch, rollouts, overrides), in the table's order."""
    import yaml  # PyYAML: the controller's dependency, and verl's on the boxes

    table = yaml.safe_load(TABLE.read_text())
    return dict(table["profiles"])


def names() -> List[str]:
    """The profile names, in the table's order."""
    return list(rows())
