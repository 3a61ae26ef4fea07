"""Make a random-weight Qwen2 model with a tokenizer trained here: no download.

Shapes:
  tiny           a few layers, small vocabulary: seconds per PPO step, for
                 smoke tests of the whole pipeline;
  qwen2.5-0.5b   exactly Qwen2.5-0.5B-Instruct's architecture (hidden 896,
                 24 layers, 14 heads, 2 KV heads, intermediate 4864, vocab
                 151936, tied embeddings, ~494M parameters): the same memory
                 profile as the real model, for memory and speed work.

The tokenizer is a byte-level BPE trained with the `tokenizers` package on
GSM8K-format text, with Qwen's chat special tokens and a ChatML chat template
(verl applies the chat template to every prompt). Its ids stay below the
model's vocabulary size. Weights are saved in fp32 (safetensors).

Its text pipeline is Qwen2's own (NFC, Qwen2's pre-tokenization pattern, one
token per digit, byte-level), not the `tokenizers` default: transformers 5
rebuilds a qwen2 model's tokenizer from that pipeline and keeps only the
vocabulary and merges of tokenizer.json, while transformers 4 reads the whole
file. With any other pipeline the two tokenize the same prompt differently
(transformers 5 split " 8" into " " and "8", where the model had learned one
token " 8"), and a model trained under one scores far lower under the other.

    python -m verl_pascal.models.make_model --shape tiny --out /tmp/tiny-qwen2
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict, List, Optional, Sequence

SHAPES: Dict[str, Dict[str, Any]] = {
    "tiny": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=4096, tokenizer_vocab=4096),
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936, tokenizer_vocab=8192),
}
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Qwen2's pre-tokenization pattern: the text is split here before the byte-level BPE (one piece
#: per digit, words with one leading non-letter, runs of punctuation, newlines, spaces).
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
               r"""|\s+(?!\S)|\s+""")
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def corpus(count: int, seed: int) -> List[str]:
    from verl_pascal.data import generate

    rows = generate.problems(count, seed=seed)
    return [r["question"] + "\n" + r["answer"] for r in rows] + ["Let's think step by step and output the final answer after \"####\"."]


def train_tokenizer(texts: Sequence[str], vocab: int, out: str) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def make(shape: str, out: str, seed: int = 0, max_positions: int = 4096) -> Dict[str, Any]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    spec = dict(SHAPES[shape])
    tokenizer = train_tokenizer(corpus(2000, seed), spec.pop("tokenizer_vocab"), out)
    torch.manual_seed(seed)
    config = Qwen2Config(
        **spec,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        torch_dtype="float32",
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    summary = {"shape": shape, "out": out, "parameters": params, "tokenizer_vocab": len(tokenizer)}
    with open(os.path.join(out, "verl-pascal-model.json"), "w") as f:
        json.dump(summary, f, indent=2)
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    print(json.dumps(make(args.shape, args.out, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
