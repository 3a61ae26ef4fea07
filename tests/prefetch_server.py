"""A local HTTP file server with failure modes, for the prefetch tests and bench.

``Upstream({"a.bin": b"..."})`` serves files on 127.0.0.1 (port 0) with
Range support, counts requests, bytes and concurrent connections, and can be
told per file to misbehave (``modes[name] = {...}``):

- ``drop``: the first response stops after ``drop_at`` bytes and closes;
- ``cap``: every response stops after this many bytes and closes;
- ``norange``: ignore Range, always answer 200 with the whole file;
- ``wrong``: serve other bytes of the same length;
- ``status``: answer this HTTP status (404, 500) with no body; with ``times``,
  only the first that many requests (a failure that passes);
- ``slow``: the first request waits this many seconds before answering;
- ``delay``: every request waits this many seconds (concurrency tests);
- ``rate``: bytes per second (a bandwidth cap, for the bench);
- ``type``: the Content-Type header (none is sent otherwise).

``simple_page`` writes a PEP 503 project page, so that an ``Upstream`` with
``{"simple/<project>/": page, "files/<name>": data}`` is a package index.
"""

from __future__ import annotations

import re
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from html import escape
from typing import Any, Dict, List, Mapping, Optional, Tuple
from urllib.parse import unquote

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


def simple_page(links: Mapping[str, Optional[str]], prefix: str = "../../files/") -> bytes:
    """A PEP 503 project page: one anchor per file name, ``#sha256=`` when a hash is given."""
    anchors = "".join(
        f'<a href="{escape(prefix + name)}{"#sha256=" + digest if digest else ""}">{escape(name)}</a><br>\n'
        for name, digest in links.items())
    return f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n".encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a test's cancelled download) is not an error of the server."""
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class Upstream:
    def __init__(self, files: Dict[str, bytes], modes: Optional[Dict[str, Dict[str, Any]]] = None):
        self.files = dict(files)
        self.modes: Dict[str, Dict[str, Any]] = modes or {}
        self.log: List[Tuple[str, Optional[str], int]] = []  # (name, Range header, status) per answer
        self.arrivals: List[str] = []  # names, as requests arrive (a timed-out one too)
        self.bytes_served = 0
        self.active = 0
        self.max_active = 0
        self._seen: Dict[str, int] = {}
        self._lock = threading.Lock()
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def requests_for(self, name: str) -> List[Tuple[str, Optional[str], int]]:
        return [entry for entry in self.log if entry[0] == name]

    def __enter__(self) -> "Upstream":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib's name)
                pass

            def do_GET(self) -> None:  # noqa: N802 (stdlib's name)
                upstream._serve(self)

        return Handler

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        name = unquote(req.path.lstrip("/").split("?", 1)[0])
        with self._lock:
            self.arrivals.append(name)
            nth = self._seen.get(name, 0)
            self._seen[name] = nth + 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            self._respond(req, name, nth)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self._lock:
                self.active -= 1

    def _record(self, name: str, req: BaseHTTPRequestHandler, status: int) -> None:
        with self._lock:
            self.log.append((name, req.headers.get("Range"), status))

    def _respond(self, req: BaseHTTPRequestHandler, name: str, nth: int) -> None:
        mode = self.modes.get(name, {})
        if mode.get("delay"):
            time.sleep(mode["delay"])
        if mode.get("slow") and nth == 0:
            time.sleep(mode["slow"])
        if name not in self.files or (mode.get("status") and nth < mode.get("times", nth + 1)):
            status = mode.get("status", 404)
            self._record(name, req, status)
            req.send_response(status)
            req.send_header("Content-Length", "0")
            req.end_headers()
            return
        data = self.files[name]
        if mode.get("wrong"):
            data = bytes(b ^ 0x5A for b in data)
        start = 0
        match = _RANGE.match(req.headers.get("Range", ""))
        status = 200
        if match and not mode.get("norange"):
            start = int(match.group(1))
            if start >= len(data):
                self._record(name, req, 416)
                req.send_response(416)
                req.send_header("Content-Range", f"bytes */{len(data)}")
                req.send_header("Content-Length", "0")
                req.end_headers()
                return
            status = 206
        self._record(name, req, status)
        req.send_response(status)
        req.send_header("Content-Length", str(len(data) - start))
        req.send_header("Accept-Ranges", "bytes")
        if mode.get("type"):
            req.send_header("Content-Type", mode["type"])
        if status == 206:
            req.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        req.end_headers()
        end = len(data)
        if mode.get("drop") and nth == 0:
            end = min(end, start + mode.get("drop_at", len(data) // 2))
        if mode.get("cap"):
            end = min(end, start + mode["cap"])
        self._send(req, data, start, end, mode.get("rate"))
        if end < len(data):
            req.close_connection = True
            req.wfile.flush()
            req.connection.shutdown(socket.SHUT_RDWR)

    def _send(self, req: BaseHTTPRequestHandler, data: bytes, start: int, end: int, rate: Optional[float]) -> None:
        block = 64 * 1024
        began = time.monotonic()
        sent = 0
        view = memoryview(data)
        for pos in range(start, end, block):
            chunk = view[pos:min(pos + block, end)]
            req.wfile.write(chunk)
            sent += len(chunk)
            with self._lock:
                self.bytes_served += len(chunk)
            if rate:
                ahead = sent / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
