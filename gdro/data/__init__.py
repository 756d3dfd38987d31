"""Datasets: the embedded synthetic copy task (and later DAPO-Math / evaluation benchmarks)."""

from gdro.data.synthetic import CopyTask, from_hf_dataset, to_hf_dataset

__all__ = ["CopyTask", "from_hf_dataset", "to_hf_dataset"]
