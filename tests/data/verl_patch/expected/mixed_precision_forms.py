"""FSDP mixed-precision policies written in every odd way the patcher must still find (compiles; never run)."""
import torch
import torch as th
from torch import bfloat16
from torch.distributed import fsdp
from torch.distributed.fsdp import MixedPrecision as MP

from verl.utils.fsdp_utils import MixedPrecisionPolicy

one_line = MP(param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32)  # verl-pascal: fp32 parameters and compute (Pascal has no bf16)
wrapped = fsdp.MixedPrecision(
    param_dtype=th.float32,  # keep this comment  # verl-pascal: fp32 parameters and compute (Pascal has no bf16)
    reduce_dtype=th.float32,
    buffer_dtype=th.float32,
)
positional = MixedPrecisionPolicy(torch.float32, torch.float32)  # verl-pascal: fp32 parameters and compute (Pascal has no bf16)
imported_name = MixedPrecisionPolicy(
    reduce_dtype=torch.float32, param_dtype=torch.float32, cast_forward_inputs=True  # verl-pascal: fp32 parameters and compute (Pascal has no bf16)
)
from_config = MP(param_dtype=param_dtype, reduce_dtype=torch.float32)  # a variable: not a site
half = MP(param_dtype=torch.float16)  # fp16: not a site
fp32 = MixedPrecisionPolicy(param_dtype=torch.float32)  # fp32 as released: not a site
other = dict(param_dtype=torch.bfloat16)  # not a mixed-precision policy: not a site
