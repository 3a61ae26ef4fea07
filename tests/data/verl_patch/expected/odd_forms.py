# -*- coding: utf-8 -*-
"""Sites written in every odd way the patcher must still find (compiles; never run)."""
import torch as th
from torch import autocast as ac, bfloat16
from torch.cuda.amp import autocast as cuda_autocast
import torch.amp

from contextlib import nullcontext


def forward(x, ctx=nullcontext()):
    with ctx, th.autocast(
        # device first
        device_type="cuda",
        dtype=th.float32, enabled=False,  # keep this comment
    ):
        with ac("cuda", bfloat16, enabled=False):  # positional dtype, imported names
            y = x
    with cuda_autocast(False, th.float32):
        pass
    with torch.amp.autocast(device_type="cuda", dtype=torch.float32, enabled=False):
        pass
    with th.autocast(device_type="cuda", dtype=th.float16):  # fp16: not a site
        pass
    with th.autocast("cpu", enabled=False):  # no dtype: not a site
        pass
    return y


@th.autocast(device_type="cuda", dtype=th.float32, enabled=False,)
def decorated():
    return "naïve café"


CONFIG = {"attn_implementation": 'sdpa', "other": "flash_attention_2"}
config._attn_implementation = "sdpa"
kwargs["attn_implementation"] = "sdpa"
attn = override.get("attn_implementation", "sdpa")
if config._attn_implementation == "flash_attention_2":  # a comparison: not a site
    pass
MSG = 'pass attn_implementation="flash_attention_2" to load it'  # in a string: not a site
UNICODE = ["ünïcödé", dict(attn_implementation="sdpa")]


def load(path, attn_implementation="sdpa", *, other="flash_attention_2"):
    return AutoModel.from_pretrained(
        path,
        attn_implementation=(
            "sdpa"
        ),
    )


if is_cuda_available:
    try:  # verl-pascal: flash-attn's helpers where it imports, pure torch otherwise
        from flash_attn.bert_padding import (
            index_first_axis as ifa,  # aliased
            pad_input,
        )
    except ImportError:
        from verl._pascal_compat.bert_padding import index_first_axis as ifa, pad_input
