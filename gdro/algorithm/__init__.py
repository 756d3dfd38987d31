"""The algorithm: one GRPO step (:class:`gdro.algorithm.trainer.Trainer`), which groups it trains on (``filters``), what
it asks of the execution layer (``execution``), and what a step records: held-out evaluation, metrics, sampled
completions, settings and seeds."""
