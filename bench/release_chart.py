#!/usr/bin/env python3
"""The verl releases side by side: docs/verl-releases.png and its Markdown table.

Reads the measured runs in docs/verl-releases.json (one home for those
numbers; each row is a run of bench/ppo_p40_rules.py, with its date and
stack) and draws three panels for the Qwen2.5-0.5B shape with the 24 GB
preset: seconds per step, generated tokens per second, and GPU memory (peak
allocated, peak reserved, nvidia-smi's peak). ``--markdown`` prints the
table that docs/benchmarks.md shows instead of drawing.

    python3 -m bench.release_chart                # writes docs/verl-releases.png
    python3 -m bench.release_chart --markdown
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict, List, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "docs", "verl-releases.json")
CHART = os.path.join(REPO, "docs", "verl-releases.png")


def load(path: str = DATA) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def markdown(data: Dict[str, Any]) -> str:
    head = ("| # | verl | date | GPU | steps | s/step, median after the first (first) | generated tokens/s, mean after the "
            "first | max allocated | max reserved | nvidia-smi peak | stack |")
    rows = [head, "|" + "---|" * 11]
    for n, r in enumerate(data["shape_runs"], 1):
        rows.append(f"| {n} | {r['verl']} | {r['date']} | {r['gpu']} | {r['steps_done']} of {r['steps_asked']} | "
                    f"{r['s_per_step_median']:.2f} ({r['s_per_step_first']:.2f}) | {r['gen_tokens_per_s_mean']:.0f} | "
                    f"{r['max_allocated_gib']:.2f} GiB | {r['max_reserved_gib']:.2f} GiB | {r['nvidia_smi_mib']} MiB | "
                    f"{r['stack']} |")
    return "\n".join(rows)


def figure(data: Dict[str, Any]) -> Any:
    """The three panels as a matplotlib figure (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a box or in CI
    import matplotlib.pyplot as plt

    runs: List[Dict[str, Any]] = data["shape_runs"]
    # the table's row number, release, month-day, GPU and steps; bars stand at positions, not at
    # these names, so that two runs with the same release, day, GPU and steps get a bar each
    names = [f"#{n}\n{r['verl']}\n{r['date'][5:]}\n{r['gpu']}\n{r['steps_done']}/{r['steps_asked']}"
             for n, r in enumerate(runs, 1)]
    where = range(len(runs))
    fig, axes = plt.subplots(3, 1, figsize=(3 + 0.75 * len(runs), 13.0))  # one panel under another
    panels = [
        ("seconds per step (median after the first)", [r["s_per_step_median"] for r in runs], "s"),
        ("generated tokens per second (mean)", [r["gen_tokens_per_s_mean"] for r in runs], "tokens/s"),
    ]
    for ax, (title, values, unit) in zip(axes, panels):
        bars = ax.bar(where, values, color="#4c72b0")
        ax.bar_label(bars, fmt="%.1f" if unit == "s" else "%.0f")
        ax.set_xticks(where, names)
        ax.margins(y=0.12)  # room for the tallest bar's number under the title
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
    ax = axes[2]
    width = 0.27
    series = [("max allocated", [r["max_allocated_gib"] for r in runs]),
              ("max reserved", [r["max_reserved_gib"] for r in runs]),
              ("nvidia-smi peak", [r["nvidia_smi_mib"] / 1024 for r in runs])]
    for i, (label, values) in enumerate(series):
        positions = [x + (i - 1) * width for x in where]
        ax.bar(positions, values, width, label=label)
    ax.axhline(22, color="grey", linestyle="--", linewidth=1, label="22 GiB cap")
    ax.set_xticks(where, names)
    ax.set_title("GPU memory per process", fontsize=10)
    ax.set_ylabel("GiB")
    ax.set_ylim(0, 30)  # room above the bars for the legend
    ax.legend(fontsize=8, loc="upper right", ncol=4)
    fig.suptitle("PPO, Qwen2.5-0.5B shape, 24 GB preset, P40 rules (cap only; 12-04: runs sharing the GPU; "
                 "compare seconds within one GPU)", fontsize=11)
    fig.tight_layout()
    return fig


def draw(data: Dict[str, Any], out: str) -> None:
    import matplotlib.pyplot as plt

    fig = figure(data)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=DATA)
    p.add_argument("--out", default=CHART)
    p.add_argument("--markdown", action="store_true", help="print the Markdown table instead of drawing")
    args = p.parse_args(argv)
    data = load(args.data)
    if args.markdown:
        print(markdown(data))
    else:
        draw(data, args.out)
        print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
