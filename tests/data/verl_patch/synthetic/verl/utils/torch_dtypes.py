# The dtype table: never rewritten, even though it holds what looks like a site.
import torch

BFLOAT_LIST = ["bf16", "bfloat16", torch.bfloat16]
SCRATCH = torch.autocast(device_type="cuda", dtype=torch.bfloat16)
