"""FSDP mixed-precision policies written in every odd way the patcher must still find (compiles; never run)."""
import torch
import torch as th
from torch import bfloat16
from torch.distributed import fsdp
from torch.distributed.fsdp import MixedPrecision as MP

from verl.utils.fsdp_utils import MixedPrecisionPolicy

one_line = MP(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
wrapped = fsdp.MixedPrecision(
    param_dtype=th.bfloat16,  # keep this comment
    reduce_dtype=th.float32,
    buffer_dtype=th.bfloat16,
)
positional = MixedPrecisionPolicy(torch.bfloat16, torch.float32)
imported_name = MixedPrecisionPolicy(
    reduce_dtype=torch.float32, param_dtype=bfloat16, cast_forward_inputs=True
)
from_config = MP(param_dtype=param_dtype, reduce_dtype=torch.float32)  # a variable: not a site
half = MP(param_dtype=torch.float16)  # fp16: not a site
fp32 = MixedPrecisionPolicy(param_dtype=torch.float32)  # fp32 as released: not a site
other = dict(param_dtype=torch.bfloat16)  # not a mixed-precision policy: not a site
