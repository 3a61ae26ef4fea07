"""Is the Ray cluster the one the inventory describes, and can it hold a run?

``wait``   until every expected node is alive with its GPUs, or time runs out:
           then name each node that is missing, dead or short of GPUs.
``gpus``   whether the cluster can place verl's pool, ``[n_gpus_per_node] * nnodes``.
``hosts``  run one task pinned to each node; print each node's hostname.

The judgement is in pure functions over ``ray.nodes()``-shaped dicts (tested
without Ray); only :func:`main` talks to the cluster.

    python -m verl_pascal.cluster.check --address 10.0.0.2:6379 wait \
        --node head=10.0.0.2:1 --node w1=10.0.0.3:2 --timeout 120
    python -m verl_pascal.cluster.check --address 10.0.0.2:6379 gpus --nnodes 3 --per-node 1
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

#: A node as ``ray.nodes()`` describes it (the keys read here).
NodeInfo = Mapping[str, Any]


@dataclass(frozen=True)
class Expected:
    """A node the inventory names: its host name, address and GPU count."""

    host: str
    address: str
    gpus: int

    @classmethod
    def parse(cls, text: str) -> "Expected":
        """``HOST=ADDRESS:GPUS``."""
        host, sep, rest = text.partition("=")
        address, sep2, gpus = rest.rpartition(":")
        if not (sep and sep2 and host and address and gpus.isdigit()):
            raise argparse.ArgumentTypeError(f"expected HOST=ADDRESS:GPUS, not {text!r}")
        return cls(host, address, int(gpus))


def alive(nodes: Sequence[NodeInfo]) -> Dict[str, float]:
    """Address -> GPUs of every live node."""
    return {str(n["NodeManagerAddress"]): float(n.get("Resources", {}).get("GPU", 0)) for n in nodes if n.get("Alive")}


def missing(nodes: Sequence[NodeInfo], expected: Sequence[Expected]) -> List[str]:
    """One line per expected node that is not alive with its GPUs; empty when the cluster is whole."""
    live = alive(nodes)
    lines = []
    for node in expected:
        if node.address not in live:
            lines.append(f"{node.host} ({node.address}) has not joined the cluster")
        elif live[node.address] != node.gpus:
            lines.append(f"{node.host} ({node.address}) joined with {live[node.address]:g} GPU(s), not {node.gpus}")
    return lines


def pool_fits(nodes: Sequence[NodeInfo], nnodes: int, per_node: int) -> Optional[str]:
    """None when ``nnodes`` live nodes have ``per_node`` GPUs each; else what is short."""
    live = alive(nodes)
    able = sorted(address for address, gpus in live.items() if gpus >= per_node)
    if len(able) >= nnodes:
        return None
    shown = ", ".join(f"{address} {gpus:g}" for address, gpus in sorted(live.items())) or "none"
    return (
        f"the run asks for {nnodes} node(s) with {per_node} GPU(s) each (trainer.nnodes x "
        f"trainer.n_gpus_per_node), and the cluster has {len(able)} such node(s) (live nodes and GPUs: "
        f"{shown}). Check `ray status` on the head; re-run site.yml to restart missing nodes."
    )


def wait(read: Callable[[], Sequence[NodeInfo]], expected: Sequence[Expected], timeout: float,
         interval: float = 2.0, clock: Callable[[], float] = time.monotonic,
         sleep: Callable[[float], None] = time.sleep) -> List[str]:
    """Poll ``read`` until no expected node is missing or ``timeout`` passes; the last shortfall."""
    deadline = clock() + timeout
    while True:
        lines = missing(read(), expected)
        if not lines or clock() >= deadline:
            return lines
        sleep(interval)


def _connect(address: str) -> Any:
    import ray  # the env's Ray, at the lock's version

    ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    return ray


def _hosts(ray: Any) -> Dict[str, str]:
    """Address -> hostname, from a task pinned to each live node."""
    import socket

    @ray.remote(num_cpus=0)
    def hostname() -> str:
        return socket.gethostname()

    addresses = sorted(alive(ray.nodes()))
    refs = [hostname.options(resources={f"node:{address}": 0.001}).remote() for address in addresses]
    return dict(zip(addresses, ray.get(refs, timeout=120)))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verl_pascal.cluster.check", description=__doc__.split("\n\n")[0])
    p.add_argument("--address", required=True, help="the head's GCS, ADDRESS:PORT")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wait", help="wait until every node has joined with its GPUs")
    w.add_argument("--node", type=Expected.parse, action="append", required=True, metavar="HOST=ADDRESS:GPUS")
    w.add_argument("--timeout", type=float, default=120.0)
    g = sub.add_parser("gpus", help="check the cluster can place [per_node] * nnodes GPUs")
    g.add_argument("--nnodes", type=int, required=True)
    g.add_argument("--per-node", type=int, required=True)
    sub.add_parser("hosts", help="print each node's hostname, from a task pinned to it (JSON)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        ray = _connect(args.address)
    except Exception as exc:  # Ray raises ConnectionError and others: all mean "no cluster there"
        print(f"cluster check: cannot reach the Ray cluster at {args.address}: {exc}", file=sys.stderr)
        return 1
    try:
        if args.command == "wait":
            lines = wait(ray.nodes, args.node, args.timeout)
            if lines:
                print(f"cluster check: after {args.timeout:g} s, " + "; ".join(lines) + ". On each such host, see "
                      "`systemctl status verl-ray` and `journalctl -u verl-ray`.", file=sys.stderr)
                return 1
            print(json.dumps({n.host: {"address": n.address, "gpus": n.gpus} for n in args.node}))
        elif args.command == "gpus":
            short = pool_fits(ray.nodes(), args.nnodes, args.per_node)
            if short:
                print(f"cluster check: {short}", file=sys.stderr)
                return 1
        else:
            print(json.dumps(_hosts(ray), sort_keys=True))
        return 0
    finally:
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
