# Outside the verl package: never rewritten.
import torch

with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    pass
