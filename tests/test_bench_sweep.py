"""The PPO sweep's plan and table (the runs themselves need a GPU: tests/test_gpu_ppo.py)."""

from __future__ import annotations

from bench import ppo_sweep


def test_the_plan_covers_every_cell_smallest_batch_first() -> None:
    cells = ppo_sweep.plan([64, 1, 8, 32], ["sdpa", "eager"], ["on", "off"])
    assert len(cells) == 16 and len(set(cells)) == 16
    assert [c.train_batch for c in cells] == sorted(c.train_batch for c in cells)


def test_batch_sizes_are_ones_verl_accepts() -> None:
    for cell in ppo_sweep.plan([1, 2, 8, 32, 64], ["sdpa"], ["on"]):
        assert cell.train_batch % cell.mini_batch == 0 and cell.mini_batch % cell.micro_batch == 0
    assert (ppo_sweep.Cell(32, "sdpa", False).mini_batch, ppo_sweep.Cell(32, "sdpa", False).micro_batch) == (16, 4)


def test_groups_keep_the_plan_order_and_the_parallel_limit() -> None:
    cells = ppo_sweep.plan([1, 8], ["sdpa", "eager"], ["on", "off"])
    grouped = ppo_sweep.groups(cells, 3)
    assert [len(g) for g in grouped] == [3, 3, 2]
    assert sum(grouped, []) == cells
    assert ppo_sweep.groups(cells, 1) == [[c] for c in cells]


def test_cells_become_runs_of_the_ppo_bench_with_their_own_work_dir(tmp_path: Path) -> None:
    args = ppo_sweep.argparse.Namespace(verl_sdist="verl.tar.gz", work=str(tmp_path), shape="tiny", steps=2,
                                        memory_gib=22.0, guard=False)
    ns = ppo_sweep.cell_args(ppo_sweep.Cell(64, "eager", True), args, "/m", 100)
    assert (ns.train_batch, ns.mini_batch, ns.micro_batch, ns.attn, ns.offload, ns.no_guard) == (64, 32, 4, "eager", True, True)
    assert ns.work == str(tmp_path / "b64-eager-on") and ns.model_dir == "/m" and ns.timeout == 100


def test_the_table_shows_steady_state_numbers_and_errors() -> None:
    done = {"train_batch": 8, "mini_batch": 4, "micro_batch": 4, "attn": "sdpa", "offload": False, "side_by_side": 4,
            "steps_done": 3, "steps_asked": 3, "s_per_step": [20.0, 8.0, 6.0], "gen_tokens_per_s": [100.0, 300.0, 350.0],
            "nvidia_smi_peak_mib": {"11": 23000, "12": 500},
            "gpu_processes": [{"max_allocated_gib": 18.49, "max_reserved_gib": 21.9}, {"max_allocated_gib": 0.1}],
            "error": None}
    failed = {**done, "attn": "eager", "steps_done": 0, "s_per_step": [], "gen_tokens_per_s": [],
              "nvidia_smi_peak_mib": {}, "gpu_processes": [], "error": "torch.OutOfMemoryError: CUDA out of memory | x"}
    lines = ppo_sweep.table([done, failed]).splitlines()
    assert lines[0].count("|") == lines[1].count("|") == 13
    assert "| 8 | 4/4 | sdpa | off | 4 | 3 of 3 | 7.0 | 325 | 18.49 | 21.90 | 23000 |  |" == lines[2]
    assert "0 of 3" in lines[3] and "OutOfMemoryError" in lines[3] and lines[3].count("|") == 13
