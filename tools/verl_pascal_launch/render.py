"""Render the launch script template with the filters Ansible gives it.

Ansible renders templates/verl-ppo.sh.j2 on real boxes (the launch role);
benchmarks on a GPU host and the template's tests render the same file here,
with `quote` (shlex.quote, as Ansible's) and `bool` (Ansible's truthiness).
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict

import jinja2

TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "templates", "verl-ppo.sh.j2")

DEFAULTS: Dict[str, Any] = {
    "ansible_managed": "Rendered by tools/verl_pascal_launch/render.py",
    "launch_gpu_summary": "(rendered outside Ansible)",
    "cuda_toolkit_path": "/usr/local/cuda",
    "launch_min_compute_cap": "6.1",
    "launch_pytorch_cuda_alloc_conf": "max_split_size_mb:128",
    "launch_train_batch_size": 32,
    "launch_ppo_mini_batch_size": 16,
    "launch_micro_batch_size": 4,
    "launch_max_prompt_length": 256,
    "launch_max_response_length": 256,
    "launch_param_offload": False,
    "launch_optimizer_offload": False,
    "launch_gpus": 1,
    "launch_project_name": "verl-pascal-gsm8k",
    "launch_total_epochs": 1,
    "launch_save_freq": -1,
    "launch_test_freq": -1,
    "launch_profile": "pascal",
    "launch_rollout": "hf",
    "training_user": "verl",
}


def ansible_bool(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on", "y", "t")


def render(variables: Dict[str, Any], template: str = TEMPLATE) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["quote"] = lambda s: shlex.quote(str(s))
    env.filters["bool"] = ansible_bool
    with open(template, encoding="utf-8") as f:
        return env.from_string(f.read()).render(**{**DEFAULTS, **variables})


def write(path: str, variables: Dict[str, Any]) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(variables))
    os.chmod(path, 0o755)
    return path
