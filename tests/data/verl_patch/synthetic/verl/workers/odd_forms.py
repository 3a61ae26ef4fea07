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
        dtype=th.bfloat16,  # keep this comment
    ):
        with ac("cuda", bfloat16):  # positional dtype, imported names
            y = x
    with cuda_autocast(True, th.bfloat16):
        pass
    with torch.amp.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=x is not None):
        pass
    with th.autocast(device_type="cuda", dtype=th.float16):  # fp16: not a site
        pass
    with th.autocast("cpu", enabled=False):  # no dtype: not a site
        pass
    return y


@th.autocast(device_type="cuda", dtype=th.bfloat16,)
def decorated():
    return "naïve café"


CONFIG = {"attn_implementation": 'flash_attention_2', "other": "flash_attention_2"}
config._attn_implementation = "flash_attention_2"
kwargs["attn_implementation"] = "flash_attention_2"
attn = override.get("attn_implementation", "flash_attention_2")
if config._attn_implementation == "flash_attention_2":  # a comparison: not a site
    pass
MSG = 'pass attn_implementation="flash_attention_2" to load it'  # in a string: not a site
UNICODE = ["ünïcödé", dict(attn_implementation="flash_attention_2")]


def load(path, attn_implementation="flash_attention_2", *, other="flash_attention_2"):
    return AutoModel.from_pretrained(
        path,
        attn_implementation=(
            "flash_attention_2"
        ),
    )


if is_cuda_available:
    from flash_attn.bert_padding import (
        index_first_axis as ifa,  # aliased
        pad_input,
    )
