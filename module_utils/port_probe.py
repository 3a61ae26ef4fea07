"""Listen on a port for a while and note who connects: can the workers reach the head?

Preflight runs :func:`listen` on the head of a cluster, in the background,
while every worker tries the head's GCS port. A worker that a firewall, a
route or a wrong interface keeps out cannot connect, and preflight names it
before anything changes. When the port is already taken (the cluster's own
GCS, on a re-run), nothing is opened and the workers try what listens there.

Standard library only, Python 3.8+ (the module ships it to the head).
"""

from __future__ import annotations

import errno
import socket
import time
from typing import Callable, Dict, List, Optional


def listen(address: str, port: int, connections: int, timeout: float,
           clock: Callable[[], float] = time.monotonic) -> Dict[str, object]:
    """Accept up to ``connections`` connections on ``address:port`` within ``timeout`` seconds.

    Returns ``{"in_use": bool, "peers": [peer address, ...]}``; ``in_use``
    when another process holds the port (then ``peers`` is empty). Raises
    OSError for any other failure to listen (an address this host does not have).
    """
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    try:
        try:
            sock.bind((address, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return {"in_use": True, "peers": []}
            raise
        sock.listen(max(connections, 1))
        peers: List[str] = []
        deadline = clock() + timeout
        while len(peers) < connections:
            left = deadline - clock()
            if left <= 0:
                break
            sock.settimeout(left)
            peer = _accept(sock)
            if peer is not None:
                peers.append(peer)
        return {"in_use": False, "peers": peers}
    finally:
        sock.close()


def _accept(sock: socket.socket) -> Optional[str]:
    try:
        conn, peer = sock.accept()
    except socket.timeout:
        return None
    conn.close()
    return str(peer[0])
