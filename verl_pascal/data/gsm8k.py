"""Convert GSM8K rows to verl's schema (verl's examples/data_preprocess/gsm8k.py).

Each output row:
  data_source  "openai/gsm8k" (selects verl's rule reward verl/utils/reward_score/gsm8k.py)
  prompt       [{"role": "user", "content": question + INSTRUCTION}]
  ability      "math"
  reward_model {"style": "rule", "ground_truth": the number after "####"}
  extra_info   {"split", "index", "answer", "question"}

Every input row travels with its location ("train.jsonl:12", "train.parquet: row 3"),
so a bad row is reported as "where: what is wrong". The row logic needs only the
standard library; reading and writing parquet needs pyarrow (present wherever
verl is installed).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import tempfile
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = ' Let\'s think step by step and output the final answer after "####".'
# The same pattern verl's preprocessing uses to take the final answer.
_ANSWER_RE = re.compile(r"#### (\-?[0-9\.\,]+)")
#: Mode of the written parquet files: the training user and the rest may read them.
OUTPUT_MODE = 0o644

#: (where, row): a row and the place it came from, for error messages.
Located = Tuple[str, Any]


class DataError(ValueError):
    """A row or file that cannot be converted; the message says which and why."""


def extract_solution(answer: str) -> str:
    """The number after '####', without thousands separators (as verl does)."""
    match = _ANSWER_RE.search(answer)
    if match is None:
        raise DataError(f"no '#### <number>' final answer in: {answer[-80:]!r}")
    return match.group(1).replace(",", "")


def to_verl_row(question: str, answer: str, split: str, index: int) -> Dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


def text_field(row: Any, name: str) -> str:
    """row[name] as text; DataError for a row that is not an object, or a missing, null or non-text field."""
    if not isinstance(row, Mapping):
        raise DataError(f"not an object but {type(row).__name__} (GSM8K rows are {{\"question\": ..., \"answer\": ...}})")
    if name not in row:
        raise DataError(f"no {name!r} field (GSM8K rows have question and answer)")
    value = row[name]
    if value is None:
        raise DataError(f"{name} is null")
    if not isinstance(value, str):
        raise DataError(f"{name} is {type(value).__name__}, not text: {value!r}")
    return value


def numbered(rows: Iterable[Any], label: str = "") -> Iterator[Located]:
    """Rows without a file location, located as "<label> row N" (N from 0)."""
    prefix = f"{label} " if label else ""
    for index, row in enumerate(rows):
        yield f"{prefix}row {index}", row


def convert_located(rows: Iterable[Located], split: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
    """Located GSM8K rows to verl rows, at most `limit` of them; errors name the location."""
    out: List[Dict[str, Any]] = []
    for where, row in rows:
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(to_verl_row(text_field(row, "question"), text_field(row, "answer"), split, len(out)))
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
    return out


def convert(rows: Iterable[Any], split: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
    """GSM8K rows ({question, answer}) to verl rows, at most `limit` of them."""
    return convert_located(numbered(rows), split, limit)


def read_jsonl(path: str) -> Iterator[Located]:
    """Rows of a JSON-lines file, each located as "path:line"; blank lines are skipped."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(
                    f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "convert the file to UTF-8"
                ) from exc
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: not JSON: {exc}") from exc
            if not isinstance(row, dict):
                raise DataError(f"{where}: not a JSON object but {type(row).__name__} (one object per line)")
            yield where, row


def read_parquet(path: str) -> Iterator[Located]:
    """Rows of a parquet file, each located as "path: row N" (N from 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except pa.ArrowException as exc:
        raise DataError(f"{path}: not a parquet file ({exc})") from exc
    yield from numbered(table.to_pylist(), f"{path}:")


def read_rows(path: str) -> Iterator[Located]:
    """Located rows of a GSM8K file: .jsonl/.json lines, or .parquet (the hub's format)."""
    if path.endswith(".parquet"):
        yield from read_parquet(path)
    elif path.endswith((".jsonl", ".json")):
        yield from read_jsonl(path)
    else:
        raise DataError(f"{path}: expected a .jsonl or .parquet GSM8K file")


def parquet_bytes(rows: List[Dict[str, Any]]) -> bytes:
    """verl rows as parquet; the same rows give the same bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows), sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def _holds(path: str, data: bytes) -> bool:
    """True when the file at path already holds exactly data."""
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest()
    except FileNotFoundError:
        return False


def same_table(path: str, data: bytes) -> bool:
    """True when the parquet file at path holds the table that the parquet bytes ``data`` hold:
    the same schema and rows, whichever pyarrow wrote it. Another pyarrow (a verl release's lock
    brings its own) writes the same rows as other bytes; the data is the same and stays."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if _holds(path, data):
        return True
    try:
        there = pq.read_table(path)
    except (OSError, pa.ArrowException):  # missing, or not a parquet file: write it
        return False
    return bool(there.equals(pq.read_table(pa.BufferReader(data)), check_metadata=False))


def _write_temp(path: str, data: bytes) -> str:
    """data in a new temporary file beside path, mode OUTPUT_MODE; its name."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gsm8k-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, OUTPUT_MODE)  # mkstemp makes 0600: the training user and others read these
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def _fix_mode(path: str) -> bool:
    """Give an unchanged output OUTPUT_MODE; True when its mode changed."""
    if stat.S_IMODE(os.stat(path).st_mode) == OUTPUT_MODE:
        return False
    os.chmod(path, OUTPUT_MODE)
    return True


def write_together(files: Mapping[str, bytes], holds: Callable[[str, bytes], bool] = _holds) -> Dict[str, bool]:
    """Write every file or none: each new content goes to a temporary file
    beside its target first, and the targets are replaced only once all are
    written (the temporary files are removed on failure). Files that already
    hold their content (``holds``: the same bytes, or :func:`same_table`) are
    left alone. Returns {path: changed}."""
    pending: List[Tuple[str, str]] = []
    changed: Dict[str, bool] = {}
    try:
        for path, data in files.items():
            if not holds(path, data):
                pending.append((_write_temp(path, data), path))
        for path in files:
            changed[path] = any(target == path for _, target in pending) or _fix_mode(path)
        for tmp, path in pending:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in pending:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        raise
    return changed


def write_if_changed(path: str, data: bytes) -> bool:
    """Write one file atomically; leave it alone (return False) when it already holds data."""
    return write_together({path: data})[path]
