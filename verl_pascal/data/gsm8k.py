"""Convert GSM8K rows to verl's schema (verl's examples/data_preprocess/gsm8k.py).

Each output row for RL (verl's main_ppo):
  data_source  "openai/gsm8k" (selects verl's rule reward verl/utils/reward_score/gsm8k.py)
  prompt       [{"role": "user", "content": question + INSTRUCTION}]
  ability      "math"
  reward_model {"style": "rule", "ground_truth": the number after "####"}
  extra_info   {"split", "index", "answer", "question"}

Each output row for SFT (verl's SFT trainer, ``verl-ppo --sft``), the same prompt and the answer:
  prompt       question + INSTRUCTION (text; verl up to 0.6 reads it as data.prompt_key)
  response     the answer, ending in "#### <number>" (data.response_key)
  messages     [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}]
               (verl from 0.7 reads the conversation, data.messages_key)
  extra_info   {"split", "index"}

A source row is GSM8K's {"question", "answer"}, or a row this converter wrote for RL
(its extra_info holds them), so the RL files already staged can be turned into SFT files.

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
#: Deepest JSON nesting read from a line; a GSM8K row is one flat object. Checked before
#: parsing, since Python's json would hit the interpreter's recursion limit on deep input.
MAX_DEPTH = 100
#: Longest integer read from a line: Python's default limit, kept where the environment lifts it.
MAX_INT_DIGITS = 4300
# A JSON string (its closing quote optional, so an unterminated one ends the line without
# backtracking) or a bracket; brackets inside strings are not nesting.
_JSON_TOKEN_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
_SURROGATE_RE = re.compile(r"[\ud800-\udfff]")

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


#: verl's GSM8K rule reward reads only a response's last characters (its _SOLUTION_CLIP_CHARS).
RULE_CLIP_CHARS = 300


def rule_score(response: str, ground_truth: str) -> float:
    """verl's GSM8K rule reward (verl/utils/reward_score/gsm8k.py, strict): 1.0 when the last
    '#### <number>' in the response's last RULE_CLIP_CHARS characters is the ground truth, else 0.0."""
    found = _ANSWER_RE.findall(response[-RULE_CLIP_CHARS:])
    return 1.0 if found and found[-1].replace(",", "").replace("$", "") == ground_truth else 0.0


def to_verl_row(question: str, answer: str, split: str, index: int) -> Dict[str, Any]:
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": question + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": extract_solution(answer)},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


#: The columns of an SFT row, as the release folders' ``sft.overrides`` name them to verl.
SFT_PROMPT = "prompt"
SFT_RESPONSE = "response"
SFT_MESSAGES = "messages"
SFT_COLUMNS = (SFT_PROMPT, SFT_RESPONSE, SFT_MESSAGES)


def to_sft_row(question: str, answer: str, split: str, index: int) -> Dict[str, Any]:
    """A row verl's SFT trainer learns from: RL's prompt and GSM8K's answer, whose final "#### <number>"
    (the form RL's reward reads) must be there."""
    extract_solution(answer)
    prompt = question + INSTRUCTION
    return {
        SFT_PROMPT: prompt,
        SFT_RESPONSE: answer,
        SFT_MESSAGES: [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}],
        "extra_info": {"split": split, "index": index},
    }


#: Makes an output row from (question, answer, split, index): to_verl_row (RL) or to_sft_row.
RowMaker = Callable[[str, str, str, int], Dict[str, Any]]


def question_answer(row: Any) -> Tuple[str, str]:
    """(question, answer) of a GSM8K row, or of a row this converter wrote for RL (in its extra_info)."""
    if isinstance(row, Mapping) and "question" not in row and isinstance(row.get("extra_info"), Mapping):
        row = row["extra_info"]
    return text_field(row, "question"), text_field(row, "answer")


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
    check_unicode(name, value)
    return value


def check_unicode(name: str, text: str) -> None:
    """DataError when text holds a lone surrogate (JSON's "\\ud800" escape, unpaired): no UTF-8 file can hold it."""
    match = _SURROGATE_RE.search(text)
    if match is not None:
        raise DataError(
            f"{name} holds a lone surrogate (\\u{ord(match.group()):04x}) at character {match.start()}, "
            "which is not valid Unicode: fix or remove that row"
        )


def numbered(rows: Iterable[Any], label: str = "") -> Iterator[Located]:
    """Rows without a file location, located as "<label> row N" (N from 0)."""
    prefix = f"{label} " if label else ""
    for index, row in enumerate(rows):
        yield f"{prefix}row {index}", row


def convert_located(rows: Iterable[Located], split: str, limit: Optional[int] = None,
                    make: RowMaker = to_verl_row) -> List[Dict[str, Any]]:
    """Located GSM8K rows to verl rows (``make``: RL's, or SFT's), at most `limit` of them; errors name the location."""
    out: List[Dict[str, Any]] = []
    for where, row in rows:
        if limit is not None and len(out) >= limit:
            break
        try:
            out.append(make(*question_answer(row), split, len(out)))
        except DataError as exc:
            raise DataError(f"{where}: {exc}") from exc
    return out


def convert(rows: Iterable[Any], split: str, limit: Optional[int] = None,
            make: RowMaker = to_verl_row) -> List[Dict[str, Any]]:
    """GSM8K rows ({question, answer}) to verl rows (RL's, or ``make``'s), at most `limit` of them."""
    return convert_located(numbered(rows), split, limit, make)


def nesting_depth(text: str, stop: int) -> int:
    """How deep JSON arrays and objects nest in text (brackets inside strings do not count);
    counting stops once it passes ``stop``."""
    depth = deepest = 0
    for token in _JSON_TOKEN_RE.finditer(text):
        bracket = token.group()
        if bracket in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > stop:
                break
        elif bracket in ("]", "}"):
            depth -= 1
    return deepest


def check_depth(line: str) -> None:
    """DataError when the JSON in line nests deeper than MAX_DEPTH."""
    if line.count("[") + line.count("{") <= MAX_DEPTH:  # it cannot nest deeper than it has brackets
        return
    if nesting_depth(line, MAX_DEPTH) > MAX_DEPTH:
        raise DataError(f"JSON nested deeper than {MAX_DEPTH} levels (a GSM8K row is one flat object): "
                        "fix or remove that line")


def _parse_int(digits: str) -> int:
    """A JSON integer; DataError for one too long to read."""
    length = len(digits.lstrip("-"))
    try:
        if length <= MAX_INT_DIGITS:
            return int(digits)
    except ValueError:  # the interpreter's own limit, when set lower
        pass
    raise DataError(f"a number of {length} digits, too long to read: fix or remove that line")


def decode_line(raw: bytes) -> str:
    """A line of a JSON-lines file as text; DataError when it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); convert the file to UTF-8"
        ) from exc


def parse_row(line: str) -> Dict[str, Any]:
    """The JSON object on a line; DataError for anything else."""
    check_depth(line)
    try:
        row = json.loads(line, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise DataError(f"not JSON: {exc}") from exc
    if not isinstance(row, dict):
        raise DataError(f"not a JSON object but {type(row).__name__} (one object per line)")
    return row


def read_jsonl(path: str) -> Iterator[Located]:
    """Rows of a JSON-lines file, each located as "path:line"; blank lines are skipped."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                line = decode_line(raw)
                if not line.strip():
                    continue
                row = parse_row(line)
            except DataError as exc:
                raise DataError(f"{where}: {exc}") from exc
            yield where, row


def read_parquet(path: str) -> Iterator[Located]:
    """Rows of a parquet file, each located as "path: row N" (N from 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except pa.ArrowException as exc:
        raise DataError(f"{path}: not a parquet file ({exc})") from exc
    try:
        rows = table.to_pylist()
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: {_bad_text_cell(table, exc)}") from exc
    yield from numbered(rows, f"{path}:")


def _bad_text_cell(table: Any, error: UnicodeDecodeError) -> str:
    """Which row and column of a parquet table hold text that is not UTF-8 (pyarrow only finds out
    when it turns the table into Python rows), for the message."""
    for index in range(table.num_rows):
        for name in table.column_names:
            try:
                table.column(name)[index].as_py()
            except UnicodeDecodeError as exc:
                return (f"row {index}: {name} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                        f"at byte {exc.start + 1}): fix or remove that row")
    return f"text that is not UTF-8 ({error}): write the file's text as UTF-8"


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
