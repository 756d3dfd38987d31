"""Rollout engines: a small protocol and its implementations (HF generate on CPU; vLLM on GPU)."""

from gdro.rollout.base import Generator, RolloutBatch, SamplingParams

__all__ = ["Generator", "RolloutBatch", "SamplingParams"]
