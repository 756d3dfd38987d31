"""Models: loading a policy and its tokenizer, the tiny and Qwen3 builders, and prompts."""
