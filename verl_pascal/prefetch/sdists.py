"""Sdists the lock pins by file name and sha256 only: their URL comes from the package index.

The lock's ``verl_releases`` name ``verl-0.5.0.tar.gz`` and its sha256, not
a URL. ``pip download`` would build the sdist's metadata (run its setup.py)
before anyone checks the sha256, so the file is located on the index's simple
API instead (``module_utils/pip_index.py``, which the verl role's
``pip_index_file`` module uses too) and downloaded by the ``Fetcher`` like
any other artifact: into ``.part``, renamed only when its sha256 is the
lock's. Nothing opens it before that.

The index is ``--pip-index-url``, else the lock's ``pip_index_url``, else
the one pip is configured with (asked of pip itself, so pip's configuration
files and ``PIP_INDEX_URL`` count), then each extra index (pip's
``extra-index-url``, ``--pip-extra-index-url``).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import List, Optional, Sequence

from verl_pascal.module_utils import pip_index

from .artifacts import Artifact, sdist_requirement


PipIndexError = pip_index.PipIndexError


class Resolver:
    """Finds each sdist's URL on the index (pip is asked for its index once, when first needed)."""

    def __init__(self, index_url: Optional[str], extra_index_urls: Sequence[str], python: str = sys.executable,
                 timeout: float = 60.0):
        self.index_url = index_url
        self.extra_index_urls = list(extra_index_urls)
        self.python = python
        self.timeout = timeout
        self._urls: Optional[List[str]] = None
        self._lock = threading.Lock()

    def index_urls(self) -> List[str]:
        with self._lock:
            if self._urls is None:
                if self.index_url:
                    urls = [self.index_url]
                else:
                    urls = pip_index.pip_index_config(self.python, timeout=self.timeout).urls
                self._urls = list(dict.fromkeys(urls + self.extra_index_urls))
            return list(self._urls)

    def resolve(self, art: Artifact) -> Artifact:
        """``art`` with the URL of its file on the index; PipIndexError when it is not there."""
        project = sdist_requirement(art.filename).split("==", 1)[0]
        found = pip_index.find_file(self.index_urls(), project, art.filename, art.sha256,
                                    fetch=lambda url: pip_index.fetch_page(url, timeout=self.timeout))
        return dataclasses.replace(art, url=found.url)


def redact(url: str) -> str:
    """A URL without its password, for the manifest and messages."""
    return str(pip_index.redact(url))
