"""Held-out evaluation: the evaluator used during training, ``gdro-eval`` and ``gdro-rescore``."""
