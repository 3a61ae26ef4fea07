"""The errors the engine raises: every one a VerlPatchError whose message says why and what to do."""

from __future__ import annotations


class VerlPatchError(Exception):
    """The tree cannot be patched as asked; the message says why and what to do."""


class BadSourceError(VerlPatchError):
    """The source directory is missing or holds no verl package."""


class DamagedSourceError(BadSourceError):
    """A file of the verl package cannot be read or parsed: the tree is damaged."""


class InterruptedPatchError(VerlPatchError):
    """The journal of an interrupted patch cannot be rolled forward."""


class UnsupportedVersionError(VerlPatchError):
    """The verl release has no patch-site table (no release folder)."""

    def __init__(self, message: str, version: str = "") -> None:
        super().__init__(message)
        self.version = version  # the tree's release, for a caller that knows why it has no table


class UpstreamChangedError(VerlPatchError):
    """A supported release lacks a site the table says it has."""


class RewriteError(VerlPatchError):
    """A rewrite would not compile, or would leave a site behind."""
