"""Convert GSM8K rows to verl's schema (verl's examples/data_preprocess/gsm8k.py).

Each output row:
  data_source  "openai/gsm8k" (selects verl's rule reward verl/utils/reward_score/gsm8k.py)
  prompt       [{"role": "user", "content": question + INSTRUCTION}]
  ability      "math"
  reward_model {"style": "rule", "ground_truth": the number after "####"}
  extra_info   {"split", "index", "answer", "question"}

The row logic needs only the standard library; reading and writing parquet
needs pyarrow (present wherever verl is installed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from typing import Any, Dict, Iterable, Iterator, List, Optional

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = ' Let\'s think step by step and output the final answer after "####".'
# The same pattern verl's preprocessing uses to take the final answer.
_ANSWER_RE = re.compile(r"#### (\-?[0-9\.\,]+)")


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


def convert(rows: Iterable[Dict[str, Any]], split: str, limit: Optional[int] = None) -> List[Dict[str, Any]]:
    """GSM8K rows ({question, answer}) to verl rows, at most `limit` of them."""
    out: List[Dict[str, Any]] = []
    for index, row in enumerate(rows):
        if limit is not None and index >= limit:
            break
        try:
            out.append(to_verl_row(str(row["question"]), str(row["answer"]), split, index))
        except KeyError as exc:
            raise DataError(f"row {index} has no {exc.args[0]!r} field (GSM8K rows have question and answer)") from exc
        except DataError as exc:
            raise DataError(f"row {index}: {exc}") from exc
    return out


def read_jsonl(path: str) -> Iterator[Dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DataError(f"{path}:{number}: not JSON: {exc}") from exc


def read_rows(path: str) -> Iterator[Dict[str, Any]]:
    """Rows of a GSM8K file: .jsonl/.json lines, or .parquet (the hub's format)."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        yield from pq.read_table(path).to_pylist()
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


def write_if_changed(path: str, data: bytes) -> bool:
    """Write atomically; leave the file alone (return False) when it already holds data."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).digest() == hashlib.sha256(data).digest():
                return False
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gsm8k-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return True
