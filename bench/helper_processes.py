#!/usr/bin/env python3
"""The host memory of verl's helper processes, on any host (no GPU needed).

Beside its GPU workers, verl 0.9.1 starts agent-loop workers, reward workers
and TransferQueue storage units (0.7 and 0.8: the first two), each a Ray actor
in a Python process of its own, 8 of each by default. This starts them as a
run does, for real (verl's own classes, a configuration composed by Hydra from
the release's tree, a tiny model's tokenizer made by verl_pascal/models), at
each count asked for, in a Ray of ``--num-cpus`` CPUs, and prints what each
kind holds (bench/host_memory: PSS per kind, the system's memory in use).

Run it with the release's dependencies importable (its lock, a CPU torch
does) and its unpacked sdist:

    python3 -m bench.helper_processes --verl-tree verl-0.9.1 --counts 8 1

Prints one JSON line per count, then a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from bench import host_memory, procs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: (key, how the count reaches verl) per helper kind, as the release folders name them.
KEYS = {
    "agent_loop_workers": "actor_rollout_ref.rollout.agent.num_workers",
    "reward_workers": "reward.num_workers",
    "transfer_queue_units": "transfer_queue.backend.SimpleStorage.num_data_storage_units",
}


def start_helpers(tree: str, model: str, count: int) -> None:
    """In this process: Ray, then ``count`` of each helper the release has, as its trainer starts them."""
    import ray
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    overrides = [f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=hf",
                 "data.train_files=/dev/null", "data.val_files=/dev/null"]
    with initialize_config_dir(config_dir=os.path.join(tree, "verl", "trainer", "config"), version_base=None):
        base = compose(config_name="ppo_trainer", overrides=overrides)
        overrides += [f"++{key}={count}" for key in KEYS.values() if OmegaConf.select(base, key) is not None]
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    actors: List[Any] = []
    if OmegaConf.select(cfg, KEYS["transfer_queue_units"]) is not None:
        import transfer_queue as tq

        cfg.transfer_queue.enable = True
        OmegaConf.resolve(cfg)
        tq.init(cfg.transfer_queue)
    if OmegaConf.select(cfg, KEYS["reward_workers"]) is not None:
        from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

        actors += [ray.remote(RewardLoopWorker).remote(cfg, None) for _ in range(count)]
    try:
        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ as AgentLoopWorker
    except ImportError:
        from verl.experimental.agent_loop.agent_loop import AgentLoopWorker as _Plain

        AgentLoopWorker = ray.remote(_Plain)
    rewards = list(actors)
    actors += [AgentLoopWorker.remote(cfg, None, None, rewards) for _ in range(count)]
    ray.get([a.__ray_ready__.remote() for a in actors])


def measure(args: argparse.Namespace, count: int, model: str) -> Dict[str, Any]:
    """One count, in a process of its own with a Ray of its own: the breakdown once every helper is up."""
    work = tempfile.mkdtemp(prefix="verl-helpers-")
    env = {**os.environ, procs.MARK: work, "PYTHONPATH": os.pathsep.join([REPO, args.verl_tree,
                                                                           os.environ.get("PYTHONPATH", "")]),
           "RAY_prestart_worker_first_driver": "0", "RAY_TMPDIR": tempfile.mkdtemp(prefix="ray", dir="/tmp")}
    code = (f"import ray, time\nfrom bench.helper_processes import start_helpers\n"
            f"ray.init(num_cpus={args.num_cpus}, include_dashboard=False)\n"
            f"start_helpers({args.verl_tree!r}, {model!r}, {count})\n"
            f"print('ready', flush=True)\ntime.sleep(3600)\n")
    with procs.reaped(work), host_memory.HostSampler(work, every_s=1.0) as sampler:
        proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        assert proc.stdout is not None
        # Ray forwards the actors' own prints to this output too: wait for ours, or the end.
        ready = any(line.strip() == "ready" for line in iter(proc.stdout.readline, ""))
        time.sleep(args.settle_s)
    report = sampler.report()
    return {"count": count, "ready": ready, "num_cpus": args.num_cpus, "verl_tree": os.path.basename(args.verl_tree),
            "run_pss_gib": report.get("run_pss_at_peak_gib"), "processes": report.get("processes_at_peak"),
            "by_kind": report.get("by_kind_at_peak", {})}


def table(rows: Sequence[Dict[str, Any]]) -> str:
    kinds = sorted({k for r in rows for k in r["by_kind"]})
    head = "| kind | " + " | ".join(f"{r['count']} of each: processes, PSS GiB" for r in rows) + " |"
    lines = [head, "|---|" + "---|" * len(rows)]
    for kind in kinds:
        cells = [f"{r['by_kind'][kind]['count']}, {r['by_kind'][kind]['pss_gib']:.2f}" if kind in r["by_kind"] else "-"
                 for r in rows]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    lines.append("| all | " + " | ".join(f"{r['processes']}, {r['run_pss_gib']:.2f}" for r in rows) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--verl-tree", required=True, help="an unpacked verl sdist (0.7.1 or newer)")
    p.add_argument("--counts", type=int, nargs="+", default=[8, 1])
    p.add_argument("--num-cpus", type=int, default=16, help="Ray's CPUs (a P40 box's cores)")
    p.add_argument("--settle-s", type=float, default=8.0)
    args = p.parse_args(argv)
    args.verl_tree = os.path.abspath(args.verl_tree)
    from verl_pascal.models import make_model

    model = os.path.join(tempfile.mkdtemp(prefix="verl-helpers-model-"), "tiny")
    make_model.make("tiny", model)
    rows = [measure(args, count, model) for count in args.counts]
    for row in rows:
        print(json.dumps(row))
    print(table(rows))
    return 0 if all(r["ready"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
