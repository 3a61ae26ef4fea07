#!/usr/bin/env python3
"""Sweep PPO under P40 rules: train batch x attention x offload, one table.

Each cell is one run of bench/ppo_p40_rules.py (patched verl, the rendered
launch script, the allocator cap, TF32 off; the per-op guard only with
--guard) for a few steps. Cells run side by side, --parallel at a time, each
in its own Ray cluster: a big GPU holds several 22 GiB-capped processes (139
GiB / 24 GiB: five on an H200), which puts a whole sweep into minutes
(docs/benchmarks.md says how many ran at once). Memory is per process and carries over
to a P40; seconds do not, and when cells share a GPU they are slower still
(the table says how many ran at once).

    python3 -m bench.ppo_sweep --verl-sdist verl-0.5.0.tar.gz --shape qwen2.5-0.5b \\
        --batches 1 8 32 64 --attn sdpa eager --offload on off --steps 2

Prints one JSON line per cell as it finishes, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence


from bench import ppo_p40_rules  # noqa: E402
from bench import procs  # noqa: E402


@dataclass(frozen=True)
class Cell:
    train_batch: int
    attn: str
    offload: bool

    @property
    def micro_batch(self) -> int:
        return min(4, self.train_batch)

    @property
    def mini_batch(self) -> int:
        """Two PPO updates per step once the batch holds two micro-batches, as the launch presets do."""
        return self.train_batch // 2 if self.train_batch >= 2 * self.micro_batch else self.train_batch

    @property
    def name(self) -> str:
        return f"b{self.train_batch}-{self.attn}-{'off' if not self.offload else 'on'}"


def plan(batches: Sequence[int], attns: Sequence[str], offloads: Sequence[str]) -> List[Cell]:
    """Every cell, smallest train batch first (the cheap ones finish even if time runs out)."""
    return [Cell(b, a, o == "on") for b in sorted(set(batches)) for a in attns for o in offloads]


def groups(cells: Sequence[Cell], parallel: int) -> List[List[Cell]]:
    """Cells that run side by side, never more than `parallel` at once, in plan order."""
    return [list(cells[i:i + parallel]) for i in range(0, len(cells), max(1, parallel))]


def cell_args(cell: Cell, args: argparse.Namespace, model_dir: str, timeout: int) -> argparse.Namespace:
    argv = ["--verl-sdist", args.verl_sdist, "--work", os.path.join(args.work, cell.name),
            "--shape", args.shape, "--steps", str(args.steps), "--train-batch", str(cell.train_batch),
            "--mini-batch", str(cell.mini_batch), "--micro-batch", str(cell.micro_batch),
            "--attn", cell.attn, "--memory-gib", str(args.memory_gib), "--timeout", str(timeout),
            "--model-dir", model_dir]
    argv += ["--offload"] if cell.offload else []
    argv += [] if args.guard else ["--no-guard"]
    return ppo_p40_rules.parser().parse_args(argv)


def _gib(values: Sequence[Dict[str, Any]], key: str) -> str:
    found = [p[key] for p in values if p.get(key) is not None]
    return f"{max(found):.2f}" if found else ""


def row(result: Dict[str, Any]) -> str:
    steady = result["s_per_step"][1:] or result["s_per_step"]
    tokens = result["gen_tokens_per_s"][1:] or result["gen_tokens_per_s"]
    smi = max(result["nvidia_smi_peak_mib"].values(), default=None)
    cells = [
        str(result["train_batch"]), f"{result['mini_batch']}/{result['micro_batch']}", result["attn"],
        "on" if result["offload"] else "off", str(result["side_by_side"]),
        f"{result['steps_done']} of {result['steps_asked']}",
        f"{statistics.mean(steady):.1f}" if steady else "",
        f"{statistics.mean(tokens):.0f}" if tokens else "",
        _gib(result["gpu_processes"], "max_allocated_gib"), _gib(result["gpu_processes"], "max_reserved_gib"),
        str(smi) if smi is not None else "",
        (result["error"] or "").replace("|", "/")[:120],
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| train batch | mini/micro | attn | offload | side by side | steps | s/step | gen tokens/s "
          "| max allocated GiB | max reserved GiB | nvidia-smi MiB | error |\n" + "|---" * 12 + "|")


def table(results: Sequence[Dict[str, Any]]) -> str:
    return "\n".join([HEADER, *(row(r) for r in results)])


def run_group(group: Sequence[Cell], args: argparse.Namespace, model_dir: str, timeout: int) -> List[Dict[str, Any]]:
    results: List[Optional[Dict[str, Any]]] = [None] * len(group)

    def one(i: int, cell: Cell) -> None:
        try:
            result = ppo_p40_rules.run(cell_args(cell, args, model_dir, timeout))
        except Exception as exc:  # a cell that cannot even start is a row, not the end of the sweep
            result = {"steps_done": 0, "steps_asked": args.steps, "s_per_step": [], "gen_tokens_per_s": [],
                      "nvidia_smi_peak_mib": {}, "gpu_processes": [], "error": f"{type(exc).__name__}: {exc}"}
        result.update(train_batch=cell.train_batch, mini_batch=cell.mini_batch, micro_batch=cell.micro_batch,
                      attn=cell.attn, offload=cell.offload, side_by_side=len(group))
        if args.logs_dir and result.get("log"):
            os.makedirs(args.logs_dir, exist_ok=True)
            shutil.copyfile(result["log"], os.path.join(args.logs_dir, f"{cell.name}.log"))
        print(json.dumps(result), flush=True)
        results[i] = result

    threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(group)]
    for t in threads:
        t.start()
        time.sleep(args.stagger_s)  # model loading is CPU- and disk-bound: spread it
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verl-sdist", required=True)
    p.add_argument("--work", default="/tmp/verl-pascal-sweep")
    p.add_argument("--shape", default="qwen2.5-0.5b", choices=["tiny", "qwen2.5-0.5b"])
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--attn", nargs="+", default=["sdpa", "eager"], choices=["sdpa", "eager"])
    p.add_argument("--offload", nargs="+", default=["on", "off"], choices=["on", "off"])
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--parallel", type=int, default=1, help="cells that run side by side")
    p.add_argument("--stagger-s", type=float, default=5.0)
    p.add_argument("--memory-gib", type=float, default=22.0)
    p.add_argument("--guard", action="store_true", help="the per-op guard too (several times slower)")
    p.add_argument("--budget-s", type=int, default=0, help="stop starting groups, and cut runs, at this many seconds")
    p.add_argument("--json-out", default="", help="also write every cell's result here")
    p.add_argument("--logs-dir", default="", help="copy every cell's log here")
    args = p.parse_args(argv)
    # Every cell's run is marked with its work directory, under --work: none outlives the sweep.
    with procs.reaped(os.path.abspath(args.work)):
        return sweep(args)


def sweep(args: argparse.Namespace) -> int:
    start = time.time()
    os.makedirs(args.work, exist_ok=True)
    model_dir = ppo_p40_rules.prepare_model(args.work, args.shape)
    results: List[Dict[str, Any]] = []
    for group in groups(plan(args.batches, args.attn, args.offload), args.parallel):
        left = int(args.budget_s - (time.time() - start)) if args.budget_s else 3000
        if left < 60:
            results += [{"train_batch": c.train_batch, "mini_batch": c.mini_batch, "micro_batch": c.micro_batch,
                         "attn": c.attn, "offload": c.offload, "side_by_side": 0, "steps_done": 0,
                         "steps_asked": args.steps, "s_per_step": [], "gen_tokens_per_s": [],
                         "nvidia_smi_peak_mib": {}, "gpu_processes": [], "error": "not run: out of time"}
                        for c in group]
            continue
        results += run_group(group, args, model_dir, left - 10)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
