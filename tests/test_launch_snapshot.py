"""What the launch script runs, for every GPU profile and verl release: a snapshot.

The run's configuration is composed in Python (verl_pascal/launch/compose.py)
and written into the script by the template. This test renders the script for
each GPU profile, each release folder, two GPU memories (two presets), a box of
its own and a cluster of two nodes of four GPUs, and both rollouts, runs its
--dry-run for PPO, GRPO, SFT and an extra override, and compares the sha256 of
each command (and of the script's settings) with tests/data/launch/dry_runs.json.

A change that moves one word of any command fails here, naming the
configurations. Where the change is meant, write the snapshot again and commit
it with the change (its diff names what changed):

    .venv/bin/python tests/test_launch_snapshot.py --write
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, Tuple

from conftest import REPO_ROOT

SNAPSHOT = REPO_ROOT / "tests" / "data" / "launch" / "dry_runs.json"
PROFILES = ("pascal", "volta_turing", "native")
MEMORIES_MIB = (24576, 12288)
CLUSTERS = ((1, 1), (2, 4))
ROLLOUTS = ("hf", "vllm")
INVOCATIONS = (("--dry-run",), ("--dry-run", "--algo", "grpo"), ("--dry-run", "--sft"), ("--dry-run", "x.y=1"))
# A model path Hydra's grammar needs quoted (a space, a comma), a data path it does not.
PATHS = {"launch_model_dir": "/opt/verl pascal/models/Qwen,2", "launch_data_dir": "/opt/vp/data/gsm8k"}
SETTINGS = re.compile(r"(?m)^(?:python|runs_dir|data_dir|model_dir|training_user|min_compute_capability|save_freq"
                      r"|resume_wait_s|cluster_\w+|default_algo|sft_module|export RAY_ADDRESS"
                      r"|declare -A host_memory_need_mib)=.*$")


def configurations() -> Iterator[Tuple[str, Dict[str, object]]]:
    from verl_pascal import verl_releases

    for profile, version, mib, (nodes, gpus), rollout in itertools.product(
            PROFILES, sorted(verl_releases.versions()), MEMORIES_MIB, CLUSTERS, ROLLOUTS):
        cluster = {"managed": nodes > 1, "hosts": [f"h{i}" for i in range(nodes)], "head": "h0",
                   "nnodes": nodes, "n_gpus_per_node": gpus}
        yield f"{profile} {version} {mib} {nodes}x{gpus} {rollout}", {
            **PATHS, "launch_host_memory_need_mib": {}, "preflight_gpu_profile": profile, "verl_version": version,
            "gpu_memory_mib": mib, "launch_cluster": cluster, "inventory_hostname": "h0", "launch_rollout": rollout,
            "launch_ray_address": "10.0.0.1:6379" if nodes > 1 else ""}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def outputs(script: str) -> Dict[str, str]:
    """The sha256 of the script's settings and of each invocation's status, stdout and stderr."""
    out = {"settings": digest("\n".join(SETTINGS.findall(Path(script).read_text())))}
    for args in INVOCATIONS:
        proc = subprocess.run([script, *args], capture_output=True, text=True, timeout=60)
        out[" ".join(args)] = digest(f"{proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return out


def snapshot(work: Path) -> Dict[str, Dict[str, str]]:
    from verl_pascal.launch import render

    return {key: outputs(render.write(str(work / "verl-ppo"), overrides)) for key, overrides in configurations()}


def test_every_profile_and_release_runs_the_commands_of_the_snapshot(tmp_path: Path) -> None:
    want = json.loads(SNAPSHOT.read_text())
    got = snapshot(tmp_path)
    assert sorted(got) == sorted(want), "configurations added or gone: write the snapshot again (see above)"
    changed = [f"{key}: {name}" for key in sorted(got) for name in got[key] if got[key][name] != want[key].get(name)]
    assert not changed, f"{len(changed)} commands changed:\n" + "\n".join(changed[:20])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        SNAPSHOT.write_text(json.dumps(snapshot(Path(work)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
