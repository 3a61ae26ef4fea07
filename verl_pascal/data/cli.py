"""gsm8k-to-verl: GSM8K (a local .jsonl/.parquet file, the HF hub at a pinned
revision, or generated problems) to verl's train/test parquet files, for RL
or, with --sft, for verl's SFT trainer (verl-ppo --sft reads them from the
data directory's sft/). Both files are written, or neither; bad input is
reported as "where: what is wrong" with exit status 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence

from . import generate, gsm8k

SPLITS = ("train", "test")


def _hub_rows(repo: str, revision: str, split: str) -> Iterable[Dict[str, str]]:
    from datasets import load_dataset  # installed with verl; needs the hub or its cache

    return load_dataset(repo, "main", revision=revision, split=split)


def _positive(text: str) -> int:
    """argparse type: an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more: an empty dataset cannot be trained on")
    return value


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gsm8k-to-verl", description=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--train-file", help="GSM8K train split, .jsonl or .parquet (use with --test-file)")
    src.add_argument("--hub", metavar="REPO", help="e.g. openai/gsm8k (needs --revision and network or the HF cache)")
    src.add_argument("--generate", type=_positive, metavar="N",
                     help="generate N (1 or more) GSM8K-format problems per split (no download)")
    p.add_argument("--test-file", help="GSM8K test split, .jsonl or .parquet")
    p.add_argument("--revision", help="hub revision (a commit) to pin with --hub")
    p.add_argument("--seed", type=int, default=0, help="seed for --generate")
    p.add_argument("--limit", type=_positive, metavar="N", help="keep at most N (1 or more) rows per split")
    p.add_argument("--sft", action="store_true",
                   help="write rows for verl's SFT trainer (prompt, response, messages) instead of RL's; a source "
                        "may also be RL files this command wrote")
    p.add_argument("--out", required=True, help="directory for train.parquet and test.parquet")
    args = p.parse_args(argv)
    if args.train_file and not args.test_file:
        p.error("--train-file needs --test-file")
    if args.hub and not args.revision:
        p.error("--hub needs --revision: an unpinned dataset is not reproducible")
    return args


def source_name(args: argparse.Namespace, split: str) -> str:
    """Where a split comes from, for messages."""
    if args.generate is not None:
        return f"generated {split} problems"
    if args.hub:
        return f"{args.hub}@{args.revision} {split}"
    return str(args.train_file if split == "train" else args.test_file)


def source_rows(args: argparse.Namespace, split: str) -> Iterable[gsm8k.Located]:
    """The split's GSM8K rows, each with its location."""
    if args.generate is not None:
        return gsm8k.numbered(generate.problems(args.generate, seed=args.seed + (0 if split == "train" else 1)),
                              source_name(args, split))
    if args.hub:
        return gsm8k.numbered(_hub_rows(args.hub, args.revision, split), source_name(args, split))
    return gsm8k.read_rows(source_name(args, split))


def converted(args: argparse.Namespace, split: str) -> List[Dict[str, Any]]:
    """The split as verl rows; DataError when it has none."""
    make = gsm8k.to_sft_row if args.sft else gsm8k.to_verl_row
    rows = gsm8k.convert_located(source_rows(args, split), split, args.limit, make)
    if not rows:
        raise gsm8k.DataError(f"{source_name(args, split)}: no rows (an empty {split} split cannot be trained on)")
    return rows


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        rows = {split: converted(args, split) for split in SPLITS}
        paths = {split: os.path.join(args.out, f"{split}.parquet") for split in SPLITS}
        changed = gsm8k.write_together({paths[s]: gsm8k.parquet_bytes(rows[s]) for s in SPLITS},
                                       holds=gsm8k.same_table)
    except (gsm8k.DataError, OSError) as exc:
        print(f"gsm8k-to-verl: {exc}", file=sys.stderr)
        return 2
    report: Dict[str, Dict[str, Any]] = {
        s: {"path": paths[s], "rows": len(rows[s]), "changed": changed[paths[s]]} for s in SPLITS
    }
    print(json.dumps(report))
    return 0


def run() -> None:
    """The ``gsm8k-to-verl`` command."""
    sys.exit(main())


if __name__ == "__main__":
    run()
