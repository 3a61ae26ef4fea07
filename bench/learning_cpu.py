#!/usr/bin/env python3
"""Choose the learning benchmark's actor learning rate on a CPU: a plain RL loop from the warm start.

Not verl: a group-baseline policy gradient (GRPO's advantage, each response's
reward less its group's mean, over the group's standard deviation; the
token-mean loss; one AdamW step a batch, the gradient clipped to 1) on the
task's training problems, sampled at temperature 1 with up to 64 new
tokens, and the held-out score (verl's GSM8K rule, one response a problem at
temperature 1) every --eval-every steps. What it tells: at which learning
rate RL from this warm start raises the held-out score, and at which it
collapses, before a GPU runs verl with it (bench/learning.py).

Prints one JSON line per step (the training score) and per evaluation.

    python3 -m bench.learning_cpu --lr 2e-4 --steps 30 --prompts 32 --n 8
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from typing import Any, List, Optional, Sequence

from verl_pascal.data import arithmetic, gsm8k
from verl_pascal.models import warm_start


def left_padded(examples: Sequence[warm_start.Example], pad: int) -> "tuple[Any, Any]":
    import torch

    width = max(len(e.prompt) for e in examples)
    ids = torch.full((len(examples), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, example in enumerate(examples):
        ids[i, width - len(example.prompt):] = torch.tensor(example.prompt)
        mask[i, width - len(example.prompt):] = 1
    return ids, mask


def step(model: Any, tokenizer: Any, optimizer: Any, batch: List[warm_start.Example], n: int) -> float:
    """One policy-gradient step on ``batch``'s prompts, ``n`` responses each; the mean reward."""
    import torch

    examples = [e for e in batch for _ in range(n)]
    ids, mask = left_padded(examples, tokenizer.pad_token_id)
    model.eval()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=warm_start.MAX_NEW_TOKENS,
                             do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    responses = out[:, ids.shape[1]:]
    rewards = torch.tensor([gsm8k.rule_score(tokenizer.decode(r, skip_special_tokens=True), e.ground_truth)
                            for r, e in zip(responses, examples)])
    groups = rewards.view(len(batch), n)
    advantages = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)).view(-1)
    keep = torch.ones_like(responses, dtype=torch.float)  # the response up to its EOS, included
    for i, response in enumerate(responses):
        eos = (response == tokenizer.eos_token_id).nonzero()
        if len(eos):
            keep[i, int(eos[0, 0]) + 1:] = 0
    model.train()
    full = torch.cat([ids, responses], dim=1)
    logits = model(input_ids=full, attention_mask=torch.cat([mask, keep.long()], dim=1)).logits[:, ids.shape[1] - 1:-1]
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)
    loss = -(advantages.unsqueeze(1) * log_probs * keep).sum() / keep.sum()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(rewards.mean())


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", default="verl-pascal-learning-cpu", help="the warm start is made here once")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prompts", type=int, default=32, help="prompts a step")
    p.add_argument("--n", type=int, default=8, help="responses a prompt")
    p.add_argument("--eval-every", type=int, default=10)
    args = p.parse_args(argv)
    if min(args.steps, args.prompts, args.eval_every) < 1 or args.n < 2 or not args.lr > 0:
        p.error("--steps, --prompts and --eval-every must be 1 or more, --n 2 or more, --lr above 0")
    import torch
    from transformers import AutoTokenizer

    model_dir, data_dir = os.path.join(args.work, "warm-model"), os.path.join(args.work, "task-data")
    if not os.path.isfile(os.path.join(model_dir, "verl-pascal-model.json")):
        print(json.dumps({"warm_start": warm_start.warm_start(model_dir, data_dir)}), flush=True)
    data = arithmetic.split(warm_start.TRAIN_PROBLEMS, warm_start.HELD_OUT_PROBLEMS, seed=0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = warm_start.load(model_dir, "cpu")
    train = warm_start.encode(tokenizer, gsm8k.convert(data.train, "train"))
    held_out = warm_start.encode(tokenizer, gsm8k.convert(data.held_out, "test"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    order = random.Random(1)
    torch.manual_seed(1)

    def evaluate(at: int) -> None:
        print(json.dumps({"step": at, "held_out_temperature_1": warm_start.held_out_score(model, tokenizer, held_out, 1.0, 0)}),
              flush=True)

    evaluate(0)
    started = time.time()
    for at in range(1, args.steps + 1):
        score = step(model, tokenizer, optimizer, [order.choice(train) for _ in range(args.prompts)], args.n)
        print(json.dumps({"step": at, "train_score": score, "s": round(time.time() - started)}), flush=True)
        if at % args.eval_every == 0:
            evaluate(at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
