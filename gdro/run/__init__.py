"""The run around the algorithm: its lifecycle (:mod:`gdro.run.lifecycle`), run.json, lock, checkpoints and migrations."""
