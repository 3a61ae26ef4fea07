"""Download one artifact into the mirror: resume, retry, verify, then rename.

The bytes go to ``<name>.part``; the final name appears only after the sha256
matches the lock, so an install never takes a partial or corrupt file. Every
byte received is written at once, so an interrupted download resumes with
``Range: bytes=<part size>-`` from the last byte that arrived; a server that
ignores Range (200 instead of 206) restarts it cleanly from zero. Connection
errors, timeouts, a short body and HTTP 408/429/5xx are retried with
exponential backoff: ``retries`` is the number of retries in a row that bring
no new byte (an attempt that extends the ``.part`` starts the count and the
backoff again, so a server that drops every connection still gets the whole
file). Other HTTP errors (404, 403, ...) and a checksum mismatch are final (a
mismatch after a resumed download gets one clean download from zero first, in
case the old part was the bad half).

A set ``cancel`` event (Ctrl-C) stops a download between two reads and during
a backoff wait; its ``.part`` is kept for the next run. A full disk (ENOSPC,
EDQUOT) fails the file with how much space it needs and how much is free, and
deletes its ``.part``: a resume would only fill the disk again.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional
from urllib.parse import urlsplit
from urllib.request import url2pathname

import requests
import urllib3

from .artifacts import Artifact
from .progress import Progress

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
USER_AGENT = "verl-pascal-prefetch/1"


@dataclass(frozen=True)
class FetchOptions:
    retries: int = 4  # retries in a row that bring no new byte
    backoff: float = 1.0  # seconds before the first retry; doubled for each next one
    backoff_max: float = 60.0
    timeout: float = 60.0  # connect and read timeout, seconds
    chunk_size: int = 1 << 20


@dataclass
class FetchResult:
    artifact: Artifact
    status: str  # "present", "fetched", "failed" or "interrupted" (its .part kept)
    sha256: Optional[str] = None  # what the file's bytes hash to (when known)
    error: Optional[str] = None
    downloaded: int = 0  # bytes received in this run
    requests: int = 0

    @property
    def ok(self) -> bool:
        return self.status in ("present", "fetched")


class RetryableError(Exception):
    """Worth another attempt: the network, a short body, a 5xx."""


class FatalError(Exception):
    """Another attempt would fail the same way: 404, a size the lock contradicts."""


class DiskFull(FatalError):
    """No space left for the file (its ``.part`` has been deleted)."""


class Interrupted(Exception):
    """The run was cancelled (Ctrl-C); the ``.part`` is kept for a resume."""


DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
READ_SIZE = 64 * 1024  # the most one read waits for, with a urllib3 that has no read1


def human(size: Optional[int]) -> str:
    """``1.5 MiB``; ``?`` for an unknown size."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(size)


def sha256_file(path: Path, chunk_size: int = 1 << 20, limit: Optional[int] = None) -> "hashlib._Hash":
    """A sha256 object fed with the file's bytes (the first ``limit`` of them)."""
    digest = hashlib.sha256()
    remaining = limit
    with open(path, "rb") as handle:
        while remaining is None or remaining > 0:
            block = handle.read(chunk_size if remaining is None else min(chunk_size, remaining))
            if not block:
                break
            digest.update(block)
            if remaining is not None:
                remaining -= len(block)
    return digest


def backoff_delay(attempt: int, opts: FetchOptions) -> float:
    """Seconds to wait before retry number ``attempt`` (1, 2, ...)."""
    return min(opts.backoff * (2 ** (attempt - 1)), opts.backoff_max)


def unlink(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def describe(exc: Exception, part: Path) -> str:
    """A one-line reason for a failed attempt, with what is kept for the resume."""
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        reason = "connection broken mid-file"
    elif isinstance(exc, requests.Timeout):
        reason = "timed out"
    else:
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    kept = part.stat().st_size if part.exists() else 0
    return f"{reason} ({kept} bytes kept)" if kept else reason


def part_path(final: Path) -> Path:
    return final.with_name(final.name + ".part")


def part_size(part: Path) -> int:
    try:
        return part.stat().st_size
    except FileNotFoundError:
        return 0


def body_chunks(response: requests.Response, size: int) -> Iterator[bytes]:
    """The body as it arrives: each read returns what is there (up to ``size``), never waits to fill it.

    A connection that breaks mid-file raises only after every byte before the
    break was yielded (requests' ``iter_content`` drops a partly filled chunk).
    """
    raw = response.raw
    read1 = getattr(raw, "read1", None)
    while True:
        try:
            if read1 is not None:
                block = read1(size, decode_content=False)
            else:  # pragma: no cover - urllib3 < 2
                block = raw.read(min(size, READ_SIZE), decode_content=False)
        except urllib3.exceptions.ReadTimeoutError as exc:
            raise requests.exceptions.ReadTimeout(exc) from exc
        except urllib3.exceptions.ProtocolError as exc:
            raise requests.exceptions.ChunkedEncodingError(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise requests.exceptions.ConnectionError(exc) from exc
        if not block:
            return
        yield block


class Fetcher:
    """Downloads artifacts into ``mirror`` (one ``Fetcher`` is shared by all threads)."""

    def __init__(self, mirror: Path, opts: FetchOptions, progress: Progress,
                 sleep: Optional[Callable[[float], None]] = None, cancel: Optional[threading.Event] = None):
        self.mirror = mirror
        self.opts = opts
        self.progress = progress
        self.cancel = cancel if cancel is not None else threading.Event()
        self.sleep = sleep if sleep is not None else self._wait

    def _wait(self, seconds: float) -> None:
        """A backoff wait that ends at once when the run is cancelled."""
        if self.cancel.wait(seconds):
            raise Interrupted("interrupted")

    # -- the whole job for one artifact ------------------------------------
    def fetch(self, art: Artifact, resolve: Optional[Callable[[Artifact], Artifact]] = None) -> FetchResult:
        """Present, fetched, failed or interrupted; ``resolve`` gives the URL, asked only when a download is due."""
        final = self.mirror / art.path
        result = FetchResult(art, "failed")
        if final.exists():
            actual = sha256_file(final, self.opts.chunk_size).hexdigest()
            if actual == art.sha256:
                result.status, result.sha256 = "present", actual
                return result
            self.progress.write(f"{art.path}: present with sha256 {actual}, the lock wants {art.sha256}: downloading it again")
            unlink(final)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.cancel.is_set():
                raise Interrupted("interrupted before it started")
            if resolve is not None:
                art = result.artifact = resolve(art)
            actual = self._download_verified(art, final, result)
        except Interrupted as exc:
            kept = part_size(part_path(final))
            result.status = "interrupted"
            result.error = f"{exc}; {human(kept)} kept in {part_path(final).name} for a resume" if kept else str(exc)
            return result
        except Exception as exc:  # every failure becomes a reported result, never a crash of the run
            result.error = str(exc) or type(exc).__name__
            if self.cancel.is_set() and not isinstance(exc, FatalError):  # Ctrl-C also hit what it waited for
                result.status = "interrupted"
            return result
        result.sha256 = actual
        if actual != art.sha256:
            result.error = f"sha256 mismatch: expected {art.sha256}, actual {actual}; the file was deleted"
            return result
        result.status = "fetched"
        return result

    def _download_verified(self, art: Artifact, final: Path, result: FetchResult) -> str:
        """Download until the bytes are complete; rename into place only if the sha256 matches."""
        part = part_path(final)
        clean_retry_left = True
        while True:
            resumed = part.exists() and part.stat().st_size > 0
            actual = self._download_with_retries(art, part, result)
            if actual == art.sha256:
                os.replace(part, final)
                return actual
            unlink(part)  # never left where an install could take it
            if resumed and clean_retry_left:
                clean_retry_left = False
                self.progress.write(f"{art.path}: resumed download failed its sha256 check; downloading it from zero")
                continue
            return actual

    def _download_with_retries(self, art: Artifact, part: Path, result: FetchResult) -> str:
        """The sha256 of the complete ``.part``; an interruption keeps the part for a resume.

        ``retries`` counts the failed attempts in a row that brought no new byte.
        """
        attempt = 0
        high = part_size(part)  # the most bytes the part has held
        while True:
            result.requests += 1
            try:
                return self._attempt(art, part, result)
            except DiskFull:
                raise  # its part is already gone
            except FatalError:
                unlink(part)
                raise
            except (RetryableError, requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
                if self.cancel.is_set():
                    raise Interrupted("interrupted") from exc
                if part_size(part) > high:
                    high = part_size(part)
                    attempt = 0  # new bytes arrived: the retry budget and the backoff start again
                attempt += 1
                reason = describe(exc, part)
                if attempt > self.opts.retries:
                    raise RetryableError(
                        f"gave up after {attempt} attempts in a row without a new byte: {reason}") from exc
                delay = backoff_delay(attempt, self.opts)
                self.progress.write(f"{art.path}: {reason}; retry {attempt}/{self.opts.retries} in {delay:.2f}s")
                self.sleep(delay)

    # -- one request ---------------------------------------------------------
    def _attempt(self, art: Artifact, part: Path, result: FetchResult) -> str:
        if self.cancel.is_set():
            raise Interrupted("interrupted")
        offset = part_size(part)
        if art.size is not None and offset > art.size:
            unlink(part)
            offset = 0
        if art.size is not None and offset == art.size and offset > 0:
            return sha256_file(part, self.opts.chunk_size).hexdigest()  # complete, not yet checked
        if urlsplit(art.url).scheme == "file":  # a file: index of pip's (sdists only)
            return self._copy_local(art, part, offset, result)
        headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        timeout = (self.opts.timeout, self.opts.timeout)
        with requests.get(art.url, headers=headers, stream=True, timeout=timeout) as response:
            offset = self._check_response(art, part, response, offset)
            length = response.headers.get("Content-Length")
            expected = offset + int(length) if length is not None and length.isdigit() else art.size
            return self._stream(art, part, body_chunks(response, self.opts.chunk_size), offset, expected, result)

    def _copy_local(self, art: Artifact, part: Path, offset: int, result: FetchResult) -> str:
        source = Path(url2pathname(urlsplit(art.url).path))
        try:
            size = source.stat().st_size
        except OSError as exc:
            raise FatalError(f"cannot read {source}: {exc}") from exc
        if offset > size:
            unlink(part)
            offset = 0
        with open(source, "rb") as handle:
            handle.seek(offset)
            chunks = iter(lambda: handle.read(self.opts.chunk_size), b"")
            return self._stream(art, part, chunks, offset, size, result)

    def _check_response(self, art: Artifact, part: Path, response: requests.Response, offset: int) -> int:
        """The offset the body starts at (0 when the server ignored Range); raises on errors."""
        code = response.status_code
        if code in RETRY_STATUS:
            raise RetryableError(f"HTTP {code} from {art.url}")
        if code == 416 and offset:
            unlink(part)  # the part does not fit the server's file: start over
            raise RetryableError(f"HTTP 416 for a resume at byte {offset}; starting from zero")
        if code not in (200, 206):
            raise FatalError(f"HTTP {code} {response.reason} from {art.url}")
        if code == 206:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if not match or int(match.group(1)) != offset:
                unlink(part)
                raise RetryableError(f"server sent range {response.headers.get('Content-Range')!r} for a resume at {offset}")
            return offset
        if offset:
            self.progress.write(f"{art.path}: server ignored the range request; downloading from zero")
            self.progress.advance(-offset)
        return 0

    def _stream(self, art: Artifact, part: Path, chunks: Iterable[bytes], offset: int, expected: Optional[int],
                result: FetchResult) -> str:
        """Append ``chunks`` to the part (from ``offset``); the sha256 of the whole part."""
        if art.size is not None and expected is not None and expected != art.size:
            raise FatalError(f"server has {expected} bytes for {art.url}, the lock says {art.size}")
        if art.size is None and expected is not None and offset == 0:
            self.progress.grow(expected)
        digest = sha256_file(part, self.opts.chunk_size, offset) if offset else hashlib.sha256()
        received = offset
        try:
            with open(part, "r+b" if offset else "wb") as handle, \
                    self.progress.file_bar(art.filename, expected, offset) as bar:
                handle.seek(offset)
                handle.truncate()
                for chunk in chunks:
                    handle.write(chunk)
                    digest.update(chunk)
                    received += len(chunk)
                    result.downloaded += len(chunk)
                    bar.update(len(chunk))
                    self.progress.advance(len(chunk))
                    if self.cancel.is_set():
                        raise Interrupted("interrupted")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            if exc.errno in DISK_FULL:
                raise DiskFull(self._disk_full(art, part, expected)) from exc
            raise
        if expected is not None and received < expected:
            raise RetryableError(f"connection closed at byte {received} of {expected}")
        return digest.hexdigest()

    def _disk_full(self, art: Artifact, part: Path, expected: Optional[int]) -> str:
        """Delete the part (a resume would fill the disk again); say what is needed and what is free."""
        unlink(part)
        try:
            free: Optional[int] = shutil.disk_usage(self.mirror).free
        except OSError:
            free = None
        needs = f"needs {human(expected)}" if expected is not None else "has an unknown size"
        short = f" (at least {human(expected - free)} more)" if expected is not None and free is not None \
            and expected > free else ""
        return (f"no space left on the disk of {self.mirror} while writing {part.name}: {art.path} {needs}, "
                f"{human(free)} is free{short}. The partial file was deleted so that no later run fills the disk "
                "with it again; free some space or choose a --mirror on a larger disk, then run again")
