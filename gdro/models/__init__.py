"""Models: loading a policy and its tokenizer, LoRA adapters and their checkpoint state, the tiny and Qwen3 builders."""
