"""The stand-in model's tokenizer tokenizes the same under transformers 4 and 5.

verl 0.5.0 runs with transformers 4, 0.9.1 with transformers 5, and the
learning benchmark's warm start is trained under one of them. Transformers 4
reads tokenizer.json whole; transformers 5 rebuilds a qwen2 model's tokenizer
from Qwen2's own text pipeline and keeps only the vocabulary and merges of
tokenizer.json. The first GPU run of the learning benchmark found the warm
start scoring 0.05 under verl 0.9.1 where it scored 0.2 under transformers 4:
the tokenizer then split " 8" into " " and "8" under transformers 5.

CI has transformers 4 only, so :func:`as_transformers_5` is a stand-in for
transformers 5's Qwen2Tokenizer, written here from its definition (not from
make_model.py, so that the check is not the code checking itself): the
vocabulary and merges of tokenizer.json behind Qwen2's NFC normalizer, split
pattern and byte-level pre-tokenizer and decoder.
"""

from __future__ import annotations

import json
import os
from typing import Any, List

import pytest

from verl_pascal.data import arithmetic, gsm8k
from verl_pascal.models import make_model

#: Qwen2's split pattern, as transformers 5's Qwen2Tokenizer sets it.
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def as_transformers_5(model_dir: str) -> Any:
    """The tokenizer of ``model_dir`` as transformers 5 builds it for a qwen2 model (the stand-in)."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        model = json.load(f)["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(BPE(vocab=model["vocab"], merges=merges, continuing_subword_prefix="", end_of_word_suffix="",
                        fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def task_texts() -> List[str]:
    """Prompts and answers of the learning task, as the warm start and verl tokenize them (no special tokens)."""
    data = arithmetic.split(256, 64, seed=0)
    rows = gsm8k.convert(data.train, "train") + gsm8k.convert(data.held_out, "test")
    return [row["prompt"][0]["content"] for row in rows] + [row["extra_info"]["answer"] for row in rows]


def mismatches(model_dir: str) -> List[str]:
    """The task texts that transformers 4 (installed) and the transformers 5 stand-in tokenize differently."""
    from transformers import AutoTokenizer

    v4, v5 = AutoTokenizer.from_pretrained(model_dir), as_transformers_5(model_dir)
    return [text for text in task_texts()
            if v4(text, add_special_tokens=False)["input_ids"] != v5.encode(text, add_special_tokens=False).ids]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("tiny"))
    make_model.train_tokenizer(make_model.corpus(2000, 0), 4096, out)
    return out


def test_the_tokenizer_tokenizes_the_same_under_transformers_4_and_5(tiny: str) -> None:
    assert mismatches(tiny) == []


def test_digits_are_tokens_of_their_own(tiny: str) -> None:
    """Qwen2's pipeline: a number is one token per digit, so " 18" and " 81" share their pieces."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    pieces = tok.convert_ids_to_tokens(tok("Eli has 18 apples", add_special_tokens=False)["input_ids"])
    assert pieces[2:5] == ["Ġ", "1", "8"], pieces


def test_the_check_catches_the_default_byte_level_pipeline(tmp_path: Any) -> None:
    """Negative control: the tokenizer made with the `tokenizers` default pipeline (what the stand-in
    model had before) tokenizes differently under the transformers 5 stand-in."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(make_model.corpus(2000, 0), trainers.BpeTrainer(
        vocab_size=4096, special_tokens=make_model.SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>").save_pretrained(str(tmp_path))
    assert len(mismatches(str(tmp_path))) > 100
