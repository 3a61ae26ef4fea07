"""A file's text at exact positions: ast positions mapped to string offsets, edits that
splice the text, and the parse that calls a file that does not parse damaged."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Sequence, Tuple

from .errors import DamagedSourceError, RewriteError

NEWLINE = re.compile(r"\r\n|\r|\n")


class SourceText:
    """A file's text with ast positions (1-based lines, UTF-8 byte columns) mapped to string offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in NEWLINE.finditer(text)]

    def line_text(self, lineno: int) -> str:
        start = self.line_starts[lineno - 1]
        end = self.line_starts[lineno] if lineno < len(self.line_starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self.line_text(lineno)
        chars = len(line.encode("utf-8")[:col_bytes].decode("utf-8", errors="ignore"))
        return self.line_starts[lineno - 1] + chars

    def span(self, node: ast.AST) -> Tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def position(self, offset: int) -> Tuple[int, int]:
        """(1-based line, 0-based character column) of a string offset."""
        lo, hi = 0, len(self.line_starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.line_starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.line_starts[lo]


@dataclass
class Edit:
    """Replace text[start:end] by ``text``."""

    start: int
    end: int
    text: str


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """Apply non-overlapping edits (zero-width inserts may touch a replacement's end)."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for prev, cur in zip(ordered, ordered[1:]):
        if cur.start < prev.end:
            raise RewriteError("overlapping edits at offsets %d and %d" % (prev.start, cur.start))
    out = text
    for edit in reversed(ordered):
        out = out[: edit.start] + edit.text + out[edit.end :]
    return out


def src_line(node: ast.AST) -> int:
    return int(getattr(node, "lineno", 0))


def end_line(node: ast.AST) -> int:
    """The last line of ``node`` (a call black wrapped over several lines ends below its first)."""
    return int(getattr(node, "end_lineno", None) or src_line(node))


def line_end_offset(src: SourceText, lineno: int) -> int:
    """The string offset of the end of line ``lineno``, before its newline: where a note is appended."""
    return src.offset(lineno, 0) + len(src.line_text(lineno))


def parse(text: str, rel: str) -> ast.AST:
    try:
        return ast.parse(text, filename=rel)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte
        where = ", line %s" % exc.lineno if isinstance(exc, SyntaxError) else ""
        raise DamagedSourceError(
            "%s is damaged: it does not parse (%s%s); reinstall verl from its sdist"
            % (rel, getattr(exc, "msg", exc), where)
        )
