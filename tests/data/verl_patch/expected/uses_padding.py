"""Imports the helpers the way verl's dp_actor.py does."""

is_cuda_available = True
is_npu_available = False

if is_cuda_available:
    try:  # verl-pascal: flash-attn's helpers where it imports, pure torch otherwise
        from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
    except ImportError:
        from verl._pascal_compat.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
elif is_npu_available:
    from transformers.integrations.npu_flash_attention import index_first_axis, pad_input, rearrange, unpad_input
