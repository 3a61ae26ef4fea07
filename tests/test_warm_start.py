"""The learning benchmark's warm start (verl_pascal/models/warm_start.py), on the CPU.

It must train on what verl will show the model (the converter's prompt through
the chat template, the answer and the end-of-turn token, the loss on the
answer only), lower the loss in a few steps, be the same for the same seed,
score responses with the GSM8K rule, and refuse bad arguments in one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, List

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from verl_pascal.data import arithmetic, gsm8k  # noqa: E402
from verl_pascal.models import make_model, warm_start  # noqa: E402

from conftest import REPO_ROOT as REPO  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny")
    make_model.make("tiny", str(out), seed=0)
    return out


@pytest.fixture(scope="module")
def tokenizer(base: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base))


@pytest.fixture(scope="module")
def examples(tokenizer: Any) -> List[warm_start.Example]:
    return warm_start.encode(tokenizer, gsm8k.convert(arithmetic.split(64, 8, seed=0).train, "train"))


def test_an_example_is_the_prompt_verl_builds_then_the_answer_and_eos(tokenizer: Any) -> None:
    row = gsm8k.convert(arithmetic.split(1, 1, seed=0).train, "train")[0]
    example = warm_start.encode(tokenizer, [row])[0]
    prompt = tokenizer.decode(example.prompt)
    assert prompt == f"<|im_start|>user\n{row['prompt'][0]['content']}<|im_end|>\n<|im_start|>assistant\n"
    assert example.response[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(example.response[:-1]) == row["extra_info"]["answer"]
    assert example.ground_truth == row["reward_model"]["ground_truth"]
    ids, mask, labels = warm_start.collate([example], tokenizer.pad_token_id)
    assert labels[0, :len(example.prompt)].eq(-100).all()  # no loss on the prompt
    assert labels[0, len(example.prompt):].tolist() == example.response
    assert ids[0].tolist() == example.prompt + example.response and mask.all()


def test_a_few_steps_lower_the_loss(base: Path, tokenizer: Any, examples: List[warm_start.Example]) -> None:
    model = warm_start.load(str(base), "cpu")
    losses = warm_start.train(model, examples, tokenizer.pad_token_id, steps=12, batch=8, lr=1e-3, seed=0)
    assert len(losses) == 12
    assert sum(losses[-3:]) / 3 < 0.8 * losses[0], losses


def parameters_after(base: Path, examples: List[warm_start.Example], pad: int, seed: int) -> List[Any]:
    model = warm_start.load(str(base), "cpu")
    warm_start.train(model, examples, pad, steps=3, batch=4, lr=1e-3, seed=seed)
    return [p.detach().clone() for p in model.parameters()]


def test_the_same_seed_trains_the_same_weights_and_another_seed_others(
        base: Path, tokenizer: Any, examples: List[warm_start.Example]) -> None:
    pad = tokenizer.pad_token_id
    first, again = parameters_after(base, examples, pad, 0), parameters_after(base, examples, pad, 0)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    other = parameters_after(base, examples, pad, 1)
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


class Scripted:
    """A stand-in model whose responses are chosen by the test: generate appends them to each prompt."""

    def __init__(self, responses: List[List[int]]) -> None:
        self.responses = responses
        self.prompts: List[List[int]] = []
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def parameters(self) -> Any:
        return iter([self.weight])

    def generate(self, input_ids: Any, attention_mask: Any, **kw: Any) -> Any:
        assert kw["max_new_tokens"] == warm_start.MAX_NEW_TOKENS
        self.prompts += [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention_mask)]
        width = max(len(r) for r in self.responses)
        out = torch.full((len(input_ids), width), kw["pad_token_id"])
        for i in range(len(input_ids)):
            response = self.responses[len(self.prompts) - len(input_ids) + i]
            out[i, :len(response)] = torch.tensor(response)
        return torch.cat([input_ids, out], dim=1)


def test_the_held_out_score_is_the_rule_rewards_mean_over_left_padded_prompts(
        tokenizer: Any, examples: List[warm_start.Example]) -> None:
    chosen = examples[:5]
    right = [e.response for e in chosen[:3]]  # the worked answers: each scores 1
    wrong = [tokenizer(f"#### {int(e.ground_truth) + 1}", add_special_tokens=False)["input_ids"] for e in chosen[3:]]
    model = Scripted(right + wrong)
    assert warm_start.held_out_score(model, tokenizer, chosen, temperature=1.0, seed=0, batch=2) == pytest.approx(0.6)
    assert model.prompts == [e.prompt for e in chosen]  # every prompt whole, the padding masked


def test_the_command_writes_the_data_and_a_model_that_loads_the_same_for_the_same_seed(tmp_path: Path) -> None:
    outputs = []
    for name in ("a", "b"):
        cmd = [sys.executable, "-m", "verl_pascal.models.warm_start", "--out", str(tmp_path / name),
               "--data-out", str(tmp_path / f"{name}-data"), "--steps", "2", "--batch", "2", "--no-score"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        outputs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert outputs[0]["steps"] == 2 and outputs[0]["loss_first"] == outputs[1]["loss_first"]
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert sorted(p.name for p in (tmp_path / "a-data").iterdir()) == ["test.parquet", "train.parquet"]
    record = json.loads((tmp_path / "a" / "verl-pascal-model.json").read_text())
    assert record["shape"] == warm_start.SHAPE and record["warm_start"]["train_problems"] == warm_start.TRAIN_PROBLEMS
    warm_start.load(str(tmp_path / "a"), "cpu")


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "--steps and --batch must be 1 or more"),
    (["--lr", "-1"], "--lr above 0"),
])
def test_bad_arguments_are_one_line_and_status_2(argv: List[str], message: str, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "verl_pascal.models.warm_start", "--out", str(tmp_path / "m"),
           "--data-out", str(tmp_path / "d"), *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr and not (tmp_path / "m").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a GPU")
def test_asking_for_a_gpu_without_one_is_one_line_and_status_2(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "verl_pascal.models.warm_start", "--out", str(tmp_path / "m"),
           "--data-out", str(tmp_path / "d"), "--device", "cuda"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.strip() == "warm_start: --device cuda: no CUDA GPU here; use --device cpu"
