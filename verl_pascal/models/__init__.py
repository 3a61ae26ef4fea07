"""Random-weight Qwen2 models and a tokenizer trained here, for runs without the hub."""
