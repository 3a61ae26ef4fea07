"""The learning benchmark's task (bench/learning.py): small GSM8K-format arithmetic.

A problem adds two numbers from LOW to HIGH and takes a third away:

    question  Ava has 7 apples. Ava buys 5 more, then gives away 3. How many apples does Ava have now?
    answer    Ava has 7 + 5 = <<7+5=12>>12 apples after buying.
              After giving away 3, Ava has 12 - 3 = <<12-3=9>>9 apples.
              #### 9

GSM8K's shape (a worked answer ending in '#### <number>'), so the project's
converter and verl's GSM8K rule reward treat it as GSM8K. The held-out
problems are split off by their numbers: no (a, b, c) of a held-out problem is
in the training split, whatever its name and item, so a held-out question was
never trained on; its two steps (a + b, then s - c) were, in other problems.
Deterministic for a seed.
"""

from __future__ import annotations

import os
import random
from typing import Dict, List, NamedTuple, Tuple

from . import gsm8k
from .generate import _ITEMS, _NAMES

#: The range of the two numbers added; the one taken away is from 1 to their sum. Small: 81 sums and
#: 170 differences, each seen many times in a run (1 to 20 has 400 and 819), and the warm start reaches
#: its target in half the steps 1 to 20 needed (docs/benchmarks.md).
LOW, HIGH = 1, 9

Numbers = Tuple[int, int, int]
Row = Dict[str, str]


class Split(NamedTuple):
    train: List[Row]
    held_out: List[Row]


def all_numbers() -> List[Numbers]:
    """Every (a, b, c) of the task: a and b from LOW to HIGH, c from 1 to a + b (so the answer is 0 or more)."""
    return [(a, b, c) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1) for c in range(1, a + b + 1)]


def problem(name: str, item: str, numbers: Numbers) -> Row:
    """One GSM8K row ({question, answer}) for ``numbers`` = (a, b, c)."""
    a, b, c = numbers
    total = a + b
    left = total - c
    question = f"{name} has {a} {item}. {name} buys {b} more, then gives away {c}. How many {item} does {name} have now?"
    answer = (f"{name} has {a} + {b} = <<{a}+{b}={total}>>{total} {item} after buying.\n"
              f"After giving away {c}, {name} has {total} - {c} = <<{total}-{c}={left}>>{left} {item}.\n#### {left}")
    return {"question": question, "answer": answer}


def split(train: int, held_out: int, seed: int = 0) -> Split:
    """``train`` training problems and ``held_out`` held-out ones, the held-out numbers never in training.

    The held-out problems have distinct numbers; the training problems are drawn (with repeats,
    each with its own name and item) from the numbers left."""
    if train < 1 or held_out < 1:
        raise ValueError(f"train={train}, held_out={held_out}: each split needs 1 problem or more")
    numbers = all_numbers()
    if held_out >= len(numbers):
        raise ValueError(f"held_out={held_out}: the task has {len(numbers)} sets of numbers, "
                         "and some must be left for training")
    rng = random.Random(seed)
    rng.shuffle(numbers)
    kept, rest = numbers[:held_out], numbers[held_out:]

    def made(chosen: Numbers) -> Row:
        return problem(rng.choice(_NAMES), rng.choice(_ITEMS), chosen)

    held = [made(n) for n in kept]
    return Split(train=[made(rng.choice(rest)) for _ in range(train)], held_out=held)


#: The file of each split in a data directory, as the launch script reads them (train, and test for validation).
FILES = {"train": "train.parquet", "held_out": "test.parquet"}


def write(out: str, data: Split) -> Dict[str, bool]:
    """Both splits as verl parquet in ``out`` (train.parquet, test.parquet: the launch script's names),
    written together; {path: changed}."""
    files = {os.path.join(out, FILES[name]): gsm8k.parquet_bytes(gsm8k.convert(rows, "test" if name == "held_out" else name))
             for name, rows in data._asdict().items()}
    return gsm8k.write_together(files, gsm8k.same_table)
