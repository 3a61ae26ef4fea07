"""Jinja filters that compose a run's configuration (verl_pascal/launch/compose.py).

The logic lives in the project's package, which the launch role, the verl
role and the renderer outside Ansible all call:

- ``launch_preset``: a run's batch sizes and offloads for its weakest GPU;
- ``launch_run``: the run's rollout and the launch script's override arrays;
- ``fitted_overrides``: what a GPU profile and a release add to every run
  (the verl role's check composes them against a new tree).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

try:
    from verl_pascal.launch import compose
except ImportError as exc:  # the controller's Python lacks the project's package
    raise ImportError(f"{Path(__file__).name}: the Python that runs Ansible cannot import verl_pascal ({exc}); "
                      "run the playbooks from the project's venv: python3 -m venv .venv && "
                      ".venv/bin/pip install -r requirements-dev.txt && .venv/bin/pip install --no-deps -e .") from exc


class FilterModule:
    """Ansible's entry point for this file's filters."""

    def filters(self) -> Dict[str, Any]:
        return {"launch_preset": compose.launch_preset, "launch_run": compose.launch_run,
                "fitted_overrides": compose.fitted_overrides}
