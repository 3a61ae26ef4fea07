"""One stack across the hosts of a play: the fleet check preflight makes before any change.

verl trains across the boxes of a Ray cluster with one environment: the same
verl, torch, CUDA and Python on every node. A host that resolves to another
version of any of them (its own host_vars, a group of its own) would install
a different stack and fail late, in the middle of a run. This compares each
host's settings with a reference host's and names every difference.

Standard library only, Python 3.8+ (it runs on the controller and the hosts).
"""

from __future__ import annotations

from typing import Any, List, Mapping


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
