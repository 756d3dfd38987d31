"""Rollout engines (HF ``generate`` on CPU or CUDA; in-process vLLM) behind the ``Generator`` Protocol of
:mod:`gdro.common.rollouts`, and the one factory, ``make_engine``, that training, ``gdro-eval`` and scripts build them with."""

from gdro.common.rollouts import Generator, RolloutBatch, SamplingParams
from gdro.rollout.factory import check_engine_config, make_engine

__all__ = ["Generator", "RolloutBatch", "SamplingParams", "check_engine_config", "make_engine"]
