"""GSM8K-format problems for runs that cannot download the real set (CI, the
GPU host). Each has a question and a worked answer ending in '#### <number>',
like GSM8K's rows, so the project's converter and verl's rule reward treat them
exactly like the real data. Deterministic for a seed."""

from __future__ import annotations

import random
from typing import Dict, List

_NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun"]
_ITEMS = ["apples", "pencils", "stickers", "marbles", "books", "cookies", "stamps", "shells"]


def problem(rng: random.Random) -> Dict[str, str]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    start, bought, price = rng.randint(2, 60), rng.randint(2, 40), rng.randint(1, 9)
    given = rng.randint(1, start + bought)
    left = start + bought - given
    question = (
        f"{name} has {start} {item}. {name} buys {bought} more at ${price} each, then gives away {given}. "
        f"How many {item} does {name} have now, and how many dollars were spent? Answer with the number of {item}."
    )
    answer = (
        f"{name} has {start} + {bought} = <<{start}+{bought}={start + bought}>>{start + bought} {item} after buying.\n"
        f"After giving away {given}, {name} has {start + bought} - {given} = "
        f"<<{start + bought}-{given}={left}>>{left} {item}.\n#### {left}"
    )
    return {"question": question, "answer": answer}


def problems(count: int, seed: int = 0) -> List[Dict[str, str]]:
    rng = random.Random(seed)
    return [problem(rng) for _ in range(count)]
