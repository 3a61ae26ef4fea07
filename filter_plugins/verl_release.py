"""Jinja filters for a verl release folder (verl_pascal/releases/verl-X/release.yml).

``release_keys``: Hydra overrides as the installed release spells its keys.
The launch template's own keys and the GPU profile's overrides are written
once, for verl 0.5.0; a release that moved a key says so in its folder's
``key_renames`` (``{old prefix: new prefix}``, from 0.8 on
``critic.model.fsdp_config.`` -> ``critic.fsdp.``). The launch script and the
verl role's check before activation both compose through this filter, so they
compose the same overrides. Without Ansible (``verl_pascal/launch/render.py``,
the tests) the same file is loaded by path.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Union

# Hydra's prefixes: + adds a key, ++ adds or sets it, ~ deletes it.
_SIGNS = ("++", "+", "~")


def release_key(override: str, renames: Mapping[str, str]) -> str:
    """One override (``[sign]key=value``) with its key under the release's name."""
    sign = next((s for s in _SIGNS if override.startswith(s)), "")
    rest = override[len(sign):]
    key, eq, value = rest.partition("=")
    for old, new in renames.items():
        if key.startswith(old):
            key = new + key[len(old):]
            break
    return sign + key + eq + value


def release_keys(overrides: Union[str, List[str]], release: Mapping[str, Any]) -> Union[str, List[str]]:
    """``overrides`` (one or a list) renamed by ``release``'s ``key_renames``."""
    renames: Dict[str, str] = dict((release or {}).get("key_renames") or {})
    if isinstance(overrides, str):
        return release_key(overrides, renames)
    return [release_key(str(o), renames) for o in overrides]


#: How many of each helper process a run needs, by what it serves: one per GPU (each GPU has its own
#: rollout server, which an agent-loop worker feeds), one per node, or none (the trainer loads a
#: step's prompts itself: tokenizing them takes milliseconds beside a step of seconds to minutes).
HOST_PROCESS_COUNTS = {
    "agent_loop_workers": "gpu",
    "reward_workers": "node",
    "transfer_queue_units": "node",
    "dataloader_workers": "none",
}


def host_process_count(process: str, cluster: Mapping[str, Any]) -> int:
    """How many ``process`` a run on ``cluster`` (nnodes, n_gpus_per_node) needs."""
    per = HOST_PROCESS_COUNTS[process]
    nodes = int(cluster.get("nnodes", 1))
    return {"gpu": nodes * int(cluster.get("n_gpus_per_node", 1)), "node": nodes, "none": 0}[per]


def host_processes(release: Mapping[str, Any], cluster: Mapping[str, Any]) -> List[str]:
    """The Hydra overrides that size ``release``'s helper processes for ``cluster``, in the folder's order.

    ``++`` sets a key the release has and adds one it reads with a default but does not list (0.4.x's
    ``data.dataloader_num_workers``)."""
    wanted = dict((release or {}).get("host_processes") or {})
    unknown = sorted(set(wanted) - set(HOST_PROCESS_COUNTS))
    if unknown:
        raise ValueError(f"host_processes names {', '.join(unknown)}: known are {', '.join(HOST_PROCESS_COUNTS)}")
    return [f"++{key}={host_process_count(process, cluster)}" for process, key in wanted.items()]


class FilterModule:
    """Ansible's entry point for this file's filters."""

    def filters(self) -> Dict[str, Any]:
        return {"release_keys": release_keys, "host_processes": host_processes}
