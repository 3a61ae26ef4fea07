"""Jinja filter ``launch_preset``: a run's batch sizes and offload for its weakest GPU's memory.

The launch role (roles/launch/tasks/preset.yml, which preflight runs too to
judge the host memory) and the renderer outside Ansible
(verl_pascal/launch/render.py, which loads this file by path) both call it,
so a run is sized by one rule:

- the preset is the first row of ``launch_memory_presets`` whose
  ``min_memory_mib`` the GPU reaches (the rows go from the largest GPU down);
- each of the user's knobs (``launch_train_batch_size``, ...) wins over the
  row's value, except 0 for a size and "" for an offload, which mean "from the
  preset"; an offload is read as Ansible's ``bool`` filter reads it;
- GRPO's sizes in responses are the row's, or, for a row without them, the
  PPO sizes the run ends up with.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

#: The batch sizes a knob of 0 takes from the preset.
SIZES = ("train_batch_size", "ppo_mini_batch_size", "micro_batch_size")
#: The offloads a knob of "" takes from the preset.
OFFLOADS = ("param_offload", "actor_param_offload", "optimizer_offload")
#: GRPO's sizes in responses -> the PPO size a row without them gives.
GRPO_SIZES = {"grpo_train_responses": "train_batch_size", "grpo_mini_responses": "ppo_mini_batch_size"}

# What Ansible's bool filter takes for true (ansible.module_utils.parsing.convert_bool).
_TRUE = ("y", "yes", "on", "1", "true", "t", "1.0")


def ansible_bool(value: object) -> bool:
    """``value`` as Ansible's ``bool`` filter reads it."""
    return str(value).strip().lower() in _TRUE


def preset_row(presets: Sequence[Mapping[str, Any]], memory_mib: object) -> Dict[str, Any]:
    """The first row whose ``min_memory_mib`` a GPU of ``memory_mib`` reaches; ValueError if none does."""
    memory = int(memory_mib)
    for row in presets:
        if int(row["min_memory_mib"]) <= memory:
            return dict(row)
    raise ValueError(f"launch_memory_presets has no row for a GPU of {memory} MiB: "
                     "give its last row min_memory_mib 0")


def launch_preset(presets: Sequence[Mapping[str, Any]], memory_mib: object,
                  knobs: Mapping[str, Any]) -> Dict[str, Any]:
    """The run's sizes and offloads (``SIZES``, ``OFFLOADS``, ``GRPO_SIZES`` and ``gpu_memory_mib``)
    for a GPU of ``memory_mib`` and the user's ``knobs`` (by preset key)."""
    row = preset_row(presets, memory_mib)
    out: Dict[str, Any] = {}
    for key in SIZES:
        out[key] = int(knobs.get(key) or 0) or int(row[key])
    for key in OFFLOADS:
        wanted = knobs.get(key, "")
        out[key] = bool(row[key]) if str(wanted) == "" else ansible_bool(wanted)
    for key, ppo in GRPO_SIZES.items():
        out[key] = int(row.get(key, out[ppo]))
    out["gpu_memory_mib"] = int(memory_mib)
    return out


class FilterModule:
    """Ansible's entry point for this file's filters."""

    def filters(self) -> Dict[str, Any]:
        return {"launch_preset": launch_preset}
