"""Rollout engines: a small protocol (``Generator``), its implementations (HF ``generate`` on CPU or CUDA; in-process vLLM) and the one
factory, ``make_engine``, that training, ``gdro-eval`` and scripts build them with."""

from gdro.rollout.base import Generator, RolloutBatch, SamplingParams
from gdro.rollout.factory import check_engine_config, make_engine

__all__ = ["Generator", "RolloutBatch", "SamplingParams", "check_engine_config", "make_engine"]
