#!/usr/bin/env python3
"""The Pascal rollout server under a verl-like load: batches formed and generation speed.

verl's agent loop sends one step's prompts from several worker processes, so
they reach the server spread over some milliseconds. This sends ``--requests``
requests from ``--senders`` senders, each sender's requests ``--spread-ms``
apart, to :class:`verl_pascal.rollout.server.GenerationServer` holding a
random-weight Qwen2 of the chosen shape (``verl_pascal/models``), in fp32, and
prints one JSON line per setting of the gather time: the batches the server
ran, the wall time, and generated tokens per second. ``--decode old`` also
times the per-row sampling loop the server used before (a host round trip per
row and token), kept here only as the baseline.

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


def old_decode(model: Any, prompts: Sequence[Sequence[int]], params: Sequence[srv.SamplingParams],
               eos_token_ids: Any, pad_token_id: int) -> List[srv.TokenResult]:
    """The baseline: each row's token picked and read back on its own (two host round trips a row)."""
    device = next(model.parameters()).device
    generators = [srv.generator_for(p, device) for p in params]
    results = [srv.TokenResult() for _ in prompts]
    ids, mask, positions = srv.left_pad(prompts, pad_token_id, device)
    past = None
    with torch.no_grad():
        while True:
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                        use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            log_probs = torch.log_softmax(logits, dim=-1)
            tokens = []
            for row, result in enumerate(results):
                if result.stop_reason is not None:
                    tokens.append(pad_token_id)
                    continue
                token = int(srv.pick_rows(logits[row][None], [params[row]], [generators[row]])[0])
                result.token_ids.append(token)
                result.log_probs.append(float(log_probs[row, token]))
                if len(result.token_ids) >= params[row].max_tokens:
                    result.stop_reason = "length"
                tokens.append(token)
            if all(r.stop_reason is not None for r in results):
                return results
            ids = torch.tensor(tokens, device=device)[:, None]
            mask = torch.cat([mask, torch.ones_like(ids)], dim=1)
            positions = positions[:, -1:] + 1


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


def measure(model: Any, args: argparse.Namespace, gather_s: float, decode: str) -> Dict[str, Any]:
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, vocab, (args.prompt_length,), generator=gen).tolist() for _ in range(args.requests)]
    params = srv.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=7)
    run = old_decode if decode == "old" else srv.decode
    server = srv.GenerationServer(model, [], 0, max_batch_size=args.max_batch, run=run, gather_s=gather_s,
                                  max_gather_s=max(gather_s, 1.0))
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    results = asyncio.run(load(server, prompts, params, args.senders, args.spread_ms / 1000))
    wall = time.perf_counter() - start
    tokens = sum(len(r.token_ids) for r in results)
    return {"shape": args.shape, "device": str(model.device), "decode": decode, "gather_s": gather_s,
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
    p.add_argument("--decode", nargs="+", default=["new"], choices=["new", "old"])
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parser().parse_args(argv)
    model = random_model(args.shape, args.device)
    for decode in args.decode:
        for gather_s in args.gather_s:
            print(json.dumps(measure(model, args, gather_s, decode)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
