"""gsm8k-to-verl: GSM8K (a local .jsonl/.parquet file, the HF hub at a pinned
revision, or generated problems) to verl's train/test parquet files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Dict, Iterable, List, Optional, Sequence

from . import generate, gsm8k


def _hub_rows(repo: str, revision: str, split: str) -> Iterable[Dict[str, str]]:
    from datasets import load_dataset  # installed with verl; needs the hub or its cache

    return load_dataset(repo, "main", revision=revision, split=split)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gsm8k-to-verl", description=__doc__)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--train-file", help="GSM8K train split, .jsonl or .parquet (use with --test-file)")
    src.add_argument("--hub", metavar="REPO", help="e.g. openai/gsm8k (needs --revision and network or the HF cache)")
    src.add_argument("--generate", type=int, metavar="N", help="generate N GSM8K-format problems per split (no download)")
    p.add_argument("--test-file", help="GSM8K test split, .jsonl or .parquet")
    p.add_argument("--revision", help="hub revision (a commit) to pin with --hub")
    p.add_argument("--seed", type=int, default=0, help="seed for --generate")
    p.add_argument("--limit", type=int, help="keep at most N rows per split")
    p.add_argument("--out", required=True, help="directory for train.parquet and test.parquet")
    args = p.parse_args(argv)
    if args.train_file and not args.test_file:
        p.error("--train-file needs --test-file")
    if args.hub and not args.revision:
        p.error("--hub needs --revision: an unpinned dataset is not reproducible")
    return args


def source_rows(args: argparse.Namespace, split: str) -> Iterable[Dict[str, str]]:
    if args.generate is not None:
        return generate.problems(args.generate, seed=args.seed + (0 if split == "train" else 1))
    if args.hub:
        return _hub_rows(args.hub, args.revision, split)
    return gsm8k.read_rows(args.train_file if split == "train" else args.test_file)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    report: Dict[str, Dict[str, object]] = {}
    try:
        for split in ("train", "test"):
            rows: List[Dict[str, object]] = gsm8k.convert(source_rows(args, split), split, args.limit)
            path = os.path.join(args.out, f"{split}.parquet")
            changed = gsm8k.write_if_changed(path, gsm8k.parquet_bytes(rows))
            report[split] = {"path": path, "rows": len(rows), "changed": changed}
    except (gsm8k.DataError, OSError) as exc:
        print(f"gsm8k-to-verl: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
