"""The run around the algorithm: its lock, record, checkpoints, tracking, seeds and lifecycle (:mod:`gdro.run.lifecycle`)."""
