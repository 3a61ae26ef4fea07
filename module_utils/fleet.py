"""The fleet: one stack across the hosts of a play, and the cluster verl trains on.

verl trains across the boxes of a Ray cluster with one environment: the same
verl, torch, CUDA and Python on every node. A host that resolves to another
version of any of them (its own host_vars, a group of its own) would install
a different stack and fail late, in the middle of a run. This compares each
host's settings with a reference host's and names every difference.

The cluster (:func:`members`, :func:`plan`): the inventory names one head
and its workers; verl places the same number of GPUs on every node
(``[n_gpus_per_node] * nnodes``), and every node runs the same patch and
batch sizes, so those come from the weakest GPU of the cluster. A host in
neither group is a box of its own: a cluster of one.

Standard library only, Python 3.8+ (it runs on the controller and the hosts).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Sequence, Tuple


class FleetError(ValueError):
    """The input names no hosts, or a reference host that is not among them."""


def differences(stacks: Mapping[str, Mapping[str, Any]], reference: str) -> List[str]:
    """One line per host and setting that differs from ``reference``'s, naming both values."""
    if reference not in stacks:
        raise FleetError("the reference host %r is not among the hosts %s" % (reference, sorted(stacks)))
    expected = stacks[reference]
    lines = []
    for host in sorted(stacks):
        if host == reference:
            continue
        for key in sorted(set(expected) | set(stacks[host])):
            got, want = stacks[host].get(key), expected.get(key)
            if str(got) != str(want):
                lines.append("%s: %s is %s, %s has %s" % (host, key, _shown(got), reference, _shown(want)))
    return lines


def _shown(value: Any) -> str:
    return "unset" if value is None else repr(str(value))


def message(lines: List[str], reference: str, hosts: int) -> str:
    return (
        "The %d hosts of this play must run one stack, %s's (verl trains across them with one "
        "environment), and %d setting(s) differ:\n  %s\nSet them per group, not per host, or run the "
        "hosts that differ in a play of their own (-l)." % (hosts, reference, len(lines), "\n  ".join(lines))
    )


def members(host: str, heads: Sequence[str], workers: Sequence[str], play_hosts: Sequence[str]) -> List[str]:
    """The nodes of ``host``'s cluster, the head first; ``[host]`` for a box in no cluster.

    Raises :class:`FleetError` when the groups are inconsistent (several
    heads, workers without a head, a host in both groups) or when the play
    leaves out a node of the cluster: the head's launch settings and every
    worker's address of the head need the facts of all of them.
    """
    both = sorted(set(heads) & set(workers))
    if both:
        raise FleetError("%s %s in both ray_head and ray_workers: put each host in one of them"
                         % (", ".join(both), "is" if len(both) == 1 else "are"))
    if len(heads) > 1:
        raise FleetError("ray_head has %d hosts (%s): a cluster has exactly one head. For several "
                         "clusters, use one inventory per cluster" % (len(heads), ", ".join(heads)))
    if workers and not heads:
        raise FleetError("ray_workers has hosts (%s) but ray_head has none: put the host the runs "
                         "start on in ray_head" % ", ".join(workers))
    cluster = list(heads) + [w for w in workers if w not in heads]
    if host not in cluster:
        return [host]
    missing = [node for node in cluster if node not in play_hosts]
    if missing:
        raise FleetError("the play leaves out %s of the cluster (%s): provision a cluster as a whole, "
                         "e.g. -l ray_head:ray_workers" % (", ".join(missing), ", ".join(cluster)))
    return cluster


def _capability(cc: Any) -> Tuple[int, int]:
    match = re.match(r"^(\d+)\.(\d+)$", str(cc).strip())
    if match is None:
        raise FleetError("not a compute capability: %r" % (cc,))
    return int(match.group(1)), int(match.group(2))


def _gpu_counts(nodes: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> str:
    return ", ".join("%s %d" % (host, len(nodes[host]["gpus"])) for host in order)


def per_node(nodes: Mapping[str, Mapping[str, Any]], order: Sequence[str], launch_gpus: int) -> int:
    """How many GPUs verl uses on each node: ``launch_gpus``, or all of them when that is 0.

    verl's pool is ``[n_gpus_per_node] * nnodes``: unequal counts are refused
    unless ``launch_gpus`` picks a count every node has.
    """
    counts = {host: len(nodes[host]["gpus"]) for host in order}
    smallest = min(counts.values())
    if launch_gpus > 0:
        short = [host for host in order if counts[host] < launch_gpus]
        if short:
            raise FleetError(
                "launch_gpus is %d, but %s %s fewer GPUs (%s): verl uses launch_gpus GPUs on every node. "
                "Set launch_gpus to %d or less." % (launch_gpus, ", ".join(short),
                                                    "has" if len(short) == 1 else "have",
                                                    _gpu_counts(nodes, order), smallest))
        return launch_gpus
    if len(set(counts.values())) > 1:
        raise FleetError(
            "The nodes have different numbers of GPUs (%s), and verl uses the same number on every node "
            "(its pool is [n_gpus_per_node] * nnodes). Set launch_gpus to the number to use on each node, "
            "%d or less (the smallest node's), or give every node the same GPUs." % (_gpu_counts(nodes, order), smallest))
    return smallest


def plan(nodes: Mapping[str, Mapping[str, Any]], order: Sequence[str], launch_gpus: int = 0) -> Dict[str, Any]:
    """What a cluster trains with, from each node's GPUs and profile.

    ``nodes``: host -> ``{"gpus": [{"memory_total_mib": .., "compute_cap": ..}, ..], "profile": ..}``
    (preflight's GPU facts); ``order``: the cluster's hosts, the head first.
    The profile and the memory preset are the weakest GPU's: the lowest
    compute capability (its host's profile) and the smallest memory.
    """
    if not order:
        raise FleetError("a cluster needs at least one host")
    absent = [host for host in order if host not in nodes or not nodes[host].get("gpus")]
    if absent:
        raise FleetError("no GPU facts for %s" % ", ".join(absent))
    gpus = per_node(nodes, order, launch_gpus)
    by_capability = sorted(order, key=lambda host: min(_capability(g["compute_cap"]) for g in nodes[host]["gpus"]))
    weakest = by_capability[0]
    memory = min(int(g["memory_total_mib"]) for host in order for g in nodes[host]["gpus"])
    return {
        "hosts": list(order),
        "head": order[0],
        "nnodes": len(order),
        "n_gpus_per_node": gpus,
        "gpus_total": sum(len(nodes[host]["gpus"]) for host in order),
        "gpus_used": gpus * len(order),
        "memory_mib": memory,
        "compute_cap": "%d.%d" % min(_capability(g["compute_cap"]) for g in nodes[weakest]["gpus"]),
        "profile": nodes[weakest]["profile"],
        "weakest": weakest,
    }
