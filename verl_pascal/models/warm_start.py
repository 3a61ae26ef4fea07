"""Warm-start a model for the learning benchmark: a plain fp32 next-token loop on the task.

RL on a random-weight model scores 0 at every step, which shows the pipeline
runs but not that it learns. The learning benchmark (bench/learning.py)
starts from a model that already scores above 0 and well below 1 on the
task's held-out problems: the tiny Qwen2 of make_model.py, trained here for
STEPS steps on the task's training split (verl_pascal/data/arithmetic.py),
each example the prompt exactly as verl builds it (the GSM8K converter's
prompt through the tokenizer's chat template) and the worked answer with the
end-of-turn token; the loss is the answer's tokens' only. fp32, eager
attention, TF32 off (P40 rules), AdamW, the gradient clipped to 1.
Deterministic for a seed on one device.

Writes the model (with its tokenizer) to --out, the task's train.parquet and
test.parquet (the held-out problems) to --data-out, and prints one JSON line:
the loss at the first and the last step, seconds, and the held-out score
(verl's GSM8K rule reward) greedy and sampled at temperature 1 (what RL sees).

    python -m verl_pascal.models.warm_start --out warm-model --data-out task-data
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

#: The warm start's settings: what bench/learning.py and playbooks/verify.yml run with (measured in
#: docs/benchmarks.md, "Learning under P40 rules").
SHAPE = "tiny"
STEPS = 250
BATCH = 32
LR = 1e-3
TRAIN_PROBLEMS = 8192
HELD_OUT_PROBLEMS = 256
#: Tokens a response may have when the warm start scores itself (the task's answers have about 45).
MAX_NEW_TOKENS = 64


class Example(NamedTuple):
    prompt: List[int]  # the prompt's token ids, as verl's dataset builds them
    response: List[int]  # the answer's token ids, the end-of-turn token last
    ground_truth: str  # the number after '####'


def encode(tokenizer: Any, verl_rows: Sequence[Dict[str, Any]]) -> List[Example]:
    """verl rows (the GSM8K converter's) as token ids: the chat-templated prompt, the answer and EOS."""
    examples = []
    for row in verl_rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        answer = row["extra_info"]["answer"] + tokenizer.eos_token
        examples.append(Example(tokenizer(prompt, add_special_tokens=False)["input_ids"],
                                tokenizer(answer, add_special_tokens=False)["input_ids"],
                                row["reward_model"]["ground_truth"]))
    return examples


def collate(examples: Sequence[Example], pad: int) -> Tuple[Any, Any, Any]:
    """(input ids, attention mask, labels), right-padded; the labels are -100 but on the responses."""
    import torch

    length = max(len(e.prompt) + len(e.response) for e in examples)
    ids = torch.full((len(examples), length), pad, dtype=torch.long)
    mask = torch.zeros((len(examples), length), dtype=torch.long)
    labels = torch.full((len(examples), length), -100, dtype=torch.long)
    for i, example in enumerate(examples):
        tokens = example.prompt + example.response
        ids[i, :len(tokens)] = torch.tensor(tokens)
        mask[i, :len(tokens)] = 1
        labels[i, len(example.prompt):len(tokens)] = torch.tensor(example.response)
    return ids, mask, labels


def fp32_rules() -> None:
    """TF32 off: every matmul in full fp32, as on a P40 (and the same numbers on any GPU)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def load(model_dir: str, device: str) -> Any:
    """The model of ``model_dir`` in fp32 with eager attention (no fused attention kernel), on ``device``."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").float().to(device)


def train(model: Any, examples: Sequence[Example], pad: int, steps: int, batch: int, lr: float, seed: int) -> List[float]:
    """``steps`` AdamW steps on batches drawn from ``examples`` (the order from ``seed``); the loss of each."""
    import torch

    torch.manual_seed(seed)
    order = random.Random(seed)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(steps):
        ids, mask, labels = (t.to(device) for t in collate([order.choice(examples) for _ in range(batch)], pad))
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.item()))
    model.eval()
    return losses


def held_out_score(model: Any, tokenizer: Any, examples: Sequence[Example], temperature: float, seed: int,
                   batch: int = 128) -> float:
    """The mean GSM8K rule reward of the model's responses: greedy when ``temperature`` is 0, else sampled
    at that temperature with top-k and top-p off (as verl's rollout samples)."""
    import torch

    from verl_pascal.data import gsm8k

    device = next(model.parameters()).device
    sampling: Dict[str, Any] = ({"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
                                if temperature > 0 else {"do_sample": False})
    torch.manual_seed(seed)
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(examples), batch):
            chunk = examples[start:start + batch]
            width = max(len(e.prompt) for e in chunk)
            ids = torch.full((len(chunk), width), tokenizer.pad_token_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, example in enumerate(chunk):  # left-padded, as verl's rollout generates
                ids[i, width - len(example.prompt):] = torch.tensor(example.prompt)
                mask[i, width - len(example.prompt):] = 1
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), max_new_tokens=MAX_NEW_TOKENS,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **sampling)
            for i, example in enumerate(chunk):
                response = tokenizer.decode(out[i, width:], skip_special_tokens=True)
                total += gsm8k.rule_score(response, example.ground_truth)
    return total / len(examples)


def warm_start(out: str, data_out: str, seed: int = 0, steps: int = STEPS, batch: int = BATCH, lr: float = LR,
               device: str = "cpu", score: bool = True) -> Dict[str, Any]:
    """Write the task's data to ``data_out`` and the warm-started model to ``out``; the summary."""
    from transformers import AutoTokenizer

    from verl_pascal.data import arithmetic, gsm8k

    from . import make_model

    fp32_rules()
    data = arithmetic.split(TRAIN_PROBLEMS, HELD_OUT_PROBLEMS, seed=seed)
    arithmetic.write(data_out, data)
    made = make_model.make(SHAPE, out, seed=seed)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = load(out, device)
    started = time.time()
    train_set = encode(tokenizer, gsm8k.convert(data.train, "train"))
    losses = train(model, train_set, tokenizer.pad_token_id, steps, batch, lr, seed)
    seconds = time.time() - started
    model.save_pretrained(out, safe_serialization=True)
    summary: Dict[str, Any] = {
        "shape": SHAPE, "parameters": made["parameters"], "seed": seed, "steps": steps, "batch": batch, "lr": lr,
        "device": device, "train_problems": len(data.train), "held_out_problems": len(data.held_out),
        "loss_first": round(losses[0], 4) if losses else None, "loss_last": round(losses[-1], 4) if losses else None,
        "train_seconds": round(seconds, 1),
    }
    if score:
        held_out = encode(tokenizer, gsm8k.convert(data.held_out, "test"))
        summary["held_out_greedy"] = held_out_score(model, tokenizer, held_out, 0.0, seed)
        summary["held_out_temperature_1"] = held_out_score(model, tokenizer, held_out, 1.0, seed)
    with open(os.path.join(out, "verl-pascal-model.json"), "w") as f:
        json.dump({**made, "warm_start": summary}, f, indent=2)
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m verl_pascal.models.warm_start", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="the warm-started model's directory")
    p.add_argument("--data-out", required=True, help="where train.parquet and test.parquet (held out) go")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--batch", type=int, default=BATCH)
    p.add_argument("--lr", type=float, default=LR)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (fp32 on any GPU)")
    p.add_argument("--no-score", action="store_true", help="skip scoring the held-out problems")
    args = p.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or not args.lr > 0:
        p.error("--steps and --batch must be 1 or more, --lr above 0")
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print(f"warm_start: --device {args.device}: no CUDA GPU here; use --device cpu", file=sys.stderr)
            return 2
    print(json.dumps(warm_start(args.out, args.data_out, args.seed, args.steps, args.batch, args.lr, args.device,
                                not args.no_score)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
