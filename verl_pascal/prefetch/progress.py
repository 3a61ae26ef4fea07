"""Progress bars: one total bar and one bar per running download (tqdm, on stderr)."""

from __future__ import annotations

import queue
import sys
import threading
from contextlib import contextmanager
from typing import IO, Iterator, Optional

from tqdm import tqdm

_BAR = {"unit": "B", "unit_scale": True, "unit_divisor": 1024, "dynamic_ncols": True, "mininterval": 0.1}


class Progress:
    """Thread-safe bars; with ``enabled=False`` only the messages are printed."""

    def __init__(self, enabled: bool, total: int, slots: int, stream: Optional[IO[str]] = None):
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self._lock = threading.Lock()
        self._slots: "queue.Queue[int]" = queue.Queue()
        for position in range(1, max(1, slots) + 1):
            self._slots.put(position)
        self.total = tqdm(total=total, desc="total", position=0, disable=not enabled, file=self.stream, **_BAR)

    def write(self, message: str) -> None:
        """A line that does not break the bars."""
        with self._lock:
            if self.enabled:
                tqdm.write(message, file=self.stream)
            else:
                print(message, file=self.stream, flush=True)

    def advance(self, nbytes: int) -> None:
        """Count bytes on the total bar (negative when a download restarts from zero)."""
        with self._lock:
            self.total.update(nbytes)

    def grow(self, nbytes: int) -> None:
        """Add to the total when a file's size becomes known only from the server."""
        with self._lock:
            self.total.total = (self.total.total or 0) + nbytes
            self.total.refresh()

    @contextmanager
    def file_bar(self, name: str, size: Optional[int], initial: int = 0) -> Iterator[tqdm]:
        """A bar for one download, on a free line; removed when the download ends."""
        position = self._slots.get()
        bar = tqdm(
            total=size,
            initial=initial,
            desc=name,
            position=position,
            leave=False,
            disable=not self.enabled,
            file=self.stream,
            **_BAR,
        )
        try:
            yield bar
        finally:
            with self._lock:
                bar.close()
            self._slots.put(position)

    def close(self) -> None:
        with self._lock:
            self.total.close()
