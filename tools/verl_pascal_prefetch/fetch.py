"""Download one artifact into the mirror: resume, retry, verify, then rename.

The bytes go to ``<name>.part``; the final name appears only after the sha256
matches the lock, so an install never takes a partial or corrupt file. An
interrupted download resumes with ``Range: bytes=<part size>-``; a server that
ignores Range (200 instead of 206) restarts it cleanly from zero. Connection
errors, timeouts, a short body and HTTP 408/429/5xx are retried with
exponential backoff, up to ``retries`` times; other HTTP errors (404, 403, ...)
and a checksum mismatch are final (a mismatch after a resumed download gets
one clean download from zero first, in case the old part was the bad half).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import requests

from .artifacts import Artifact
from .progress import Progress

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
USER_AGENT = "verl-pascal-prefetch/1"


@dataclass(frozen=True)
class FetchOptions:
    retries: int = 4  # attempts after the first one
    backoff: float = 1.0  # seconds before the first retry; doubled for each next one
    backoff_max: float = 60.0
    timeout: float = 60.0  # connect and read timeout, seconds
    chunk_size: int = 1 << 20


@dataclass
class FetchResult:
    artifact: Artifact
    status: str  # "present", "fetched" or "failed"
    sha256: Optional[str] = None  # what the file's bytes hash to (when known)
    error: Optional[str] = None
    downloaded: int = 0  # bytes received in this run
    requests: int = 0

    @property
    def ok(self) -> bool:
        return self.status != "failed"


class RetryableError(Exception):
    """Worth another attempt: the network, a short body, a 5xx."""


class FatalError(Exception):
    """Another attempt would fail the same way: 404, a size the lock contradicts."""


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


class Fetcher:
    """Downloads artifacts into ``mirror`` (one ``Fetcher`` is shared by all threads)."""

    def __init__(self, mirror: Path, opts: FetchOptions, progress: Progress,
                 sleep: Callable[[float], None] = time.sleep):
        self.mirror = mirror
        self.opts = opts
        self.progress = progress
        self.sleep = sleep

    # -- the whole job for one artifact ------------------------------------
    def fetch(self, art: Artifact) -> FetchResult:
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
            actual = self._download_verified(art, final, result)
        except Exception as exc:  # every failure becomes a reported result, never a crash of the pool
            result.error = str(exc) or type(exc).__name__
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
        """The sha256 of the complete ``.part``; an interruption keeps the part for a resume."""
        attempt = 0
        while True:
            result.requests += 1
            try:
                return self._attempt(art, part, result)
            except FatalError:
                unlink(part)
                raise
            except (RetryableError, requests.ConnectionError, requests.Timeout,
                    requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
                attempt += 1
                reason = describe(exc, part)
                if attempt > self.opts.retries:
                    raise RetryableError(f"gave up after {attempt} attempts: {reason}") from exc
                delay = backoff_delay(attempt, self.opts)
                self.progress.write(f"{art.path}: {reason}; retry {attempt}/{self.opts.retries} in {delay:.2f}s")
                self.sleep(delay)

    # -- one HTTP request --------------------------------------------------
    def _attempt(self, art: Artifact, part: Path, result: FetchResult) -> str:
        offset = part.stat().st_size if part.exists() else 0
        if art.size is not None and offset > art.size:
            unlink(part)
            offset = 0
        if art.size is not None and offset == art.size and offset > 0:
            return sha256_file(part, self.opts.chunk_size).hexdigest()  # complete, not yet checked
        headers = {"Accept-Encoding": "identity", "User-Agent": USER_AGENT}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        timeout = (self.opts.timeout, self.opts.timeout)
        with requests.get(art.url, headers=headers, stream=True, timeout=timeout) as response:
            offset = self._check_response(art, part, response, offset)
            return self._stream(art, part, response, offset, result)

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

    def _stream(self, art: Artifact, part: Path, response: requests.Response, offset: int, result: FetchResult) -> str:
        length = response.headers.get("Content-Length")
        expected = offset + int(length) if length is not None and length.isdigit() else art.size
        if art.size is not None and expected is not None and expected != art.size:
            raise FatalError(f"server has {expected} bytes for {art.url}, the lock says {art.size}")
        if art.size is None and expected is not None and offset == 0:
            self.progress.grow(expected)
        digest = sha256_file(part, self.opts.chunk_size, offset) if offset else hashlib.sha256()
        received = offset
        with open(part, "r+b" if offset else "wb") as handle, \
                self.progress.file_bar(art.filename, expected, offset) as bar:
            handle.seek(offset)
            handle.truncate()
            for chunk in response.iter_content(chunk_size=self.opts.chunk_size):
                handle.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                result.downloaded += len(chunk)
                bar.update(len(chunk))
                self.progress.advance(len(chunk))
            handle.flush()
            os.fsync(handle.fileno())
        if expected is not None and received < expected:
            raise RetryableError(f"connection closed at byte {received} of {expected}")
        return digest.hexdigest()
