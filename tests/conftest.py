"""pytest setup: make the repository root importable.

Tests import the logic as ``from module_utils import NAME`` (for example
``nvidia_gpu``): the same files Ansible ships to hosts as
``ansible.module_utils.NAME``.
"""

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
