"""Datasets: the embedded synthetic tasks, DAPO-Math and the evaluation benchmarks, and how a problem becomes a prompt."""

from gdro.data.synthetic import CopyTask, from_hf_dataset, to_hf_dataset

__all__ = ["CopyTask", "from_hf_dataset", "to_hf_dataset"]
