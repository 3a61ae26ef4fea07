#!/usr/bin/env python3
"""The Pascal rollout server under a verl-like load: batches formed and generation speed.

verl's agent loop sends one step's prompts from several worker processes, so
they reach the server spread over some milliseconds. This sends ``--requests``
requests from ``--senders`` senders, each sender's requests ``--spread-ms``
apart, to :class:`verl_pascal.rollout.server.GenerationServer` holding a
random-weight Qwen2 of the chosen shape (``verl_pascal/models``), in fp32, and
prints one JSON line per setting of the gather time: the batches the server
ran, the wall time, and generated tokens per second.

    python3 -m bench.rollout_server --shape tiny --requests 32 --max-tokens 64
    python3 -m bench.rollout_server --shape qwen2.5-0.5b --device cuda --max-tokens 256

Times are the host's; on a GPU they include the kernel launches the loop costs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any, Dict, List, Optional, Sequence

import torch

from verl_pascal.rollout import server as srv


def random_model(shape: str, device: str) -> Any:
    import transformers

    from verl_pascal.models.make_model import SHAPES

    spec = {k: v for k, v in SHAPES[shape].items() if k != "tokenizer_vocab"}
    torch.manual_seed(0)
    config = transformers.Qwen2Config(max_position_embeddings=4096, tie_word_embeddings=True,
                                      attn_implementation="sdpa", **spec)
    return transformers.Qwen2ForCausalLM(config).to(device=device, dtype=torch.float32).eval()


async def load(server: srv.GenerationServer, prompts: List[List[int]], params: srv.SamplingParams, senders: int,
               spread_s: float) -> List[srv.TokenResult]:
    async def sender(mine: List[List[int]]) -> List[srv.TokenResult]:
        futures = []
        for prompt in mine:
            futures.append(asyncio.ensure_future(server.generate(prompt, params)))
            await asyncio.sleep(spread_s)
        return list(await asyncio.gather(*futures))

    chunks = [prompts[i::senders] for i in range(senders)]
    return [r for chunk in await asyncio.gather(*(sender(c) for c in chunks)) for r in chunk]


def measure(model: Any, args: argparse.Namespace, gather_s: float) -> Dict[str, Any]:
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, vocab, (args.prompt_length,), generator=gen).tolist() for _ in range(args.requests)]
    params = srv.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=7)
    server = srv.GenerationServer(model, [], 0, max_batch_size=args.max_batch, gather_s=gather_s,
                                  max_gather_s=max(gather_s, 1.0))
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    results = asyncio.run(load(server, prompts, params, args.senders, args.spread_ms / 1000))
    wall = time.perf_counter() - start
    tokens = sum(len(r.token_ids) for r in results)
    return {"shape": args.shape, "device": str(model.device), "gather_s": gather_s,
            "requests": args.requests, "senders": args.senders, "spread_ms": args.spread_ms,
            "max_tokens": args.max_tokens, "batches": server.batch_sizes, "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens / wall, 1)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="tiny", choices=["tiny", "qwen2.5-0.5b"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--senders", type=int, default=8, help="like verl's agent-loop workers (num_workers, default 8)")
    p.add_argument("--spread-ms", type=float, default=5.0, help="time between one sender's requests")
    p.add_argument("--prompt-length", type=int, default=72)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-batch", type=int, default=64, help="the server's max_num_seqs")
    p.add_argument("--gather-s", type=float, nargs="+", default=[0.0, 0.05])
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    model = random_model(args.shape, args.device)
    for gather_s in args.gather_s:
        print(json.dumps(measure(model, args, gather_s)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
