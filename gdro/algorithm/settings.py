"""The run's top-level settings (conf/train.yaml's own keys): seed, steps, batch shape, device, what is shown.

Read by the algorithm (gdro.algorithm.trainer.Trainer: seed, batch shape, when to evaluate) and by the run's lifecycle
(gdro.run.lifecycle.Lifecycle: steps, the final save, the progress bar). A bad value fails when it is built, before any
model loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gdro.algorithm.samples import SampleConfig


@dataclass(frozen=True)
class RunSettings:
    """Top-level run settings (conf/train.yaml)."""

    seed: int = 0
    steps: int = 150
    prompts_per_step: int = 32
    rollouts_per_prompt: int = 8  # n̄: the mean rollout budget per prompt
    threads: int | Literal["auto"] | None = "auto"  # torch intra-op threads: a number, auto (the free cores), None (torch's)
    device: str = "auto"  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N: model, reference, engine, batches
    save_final: bool = True  # save the final policy to <run_dir>/checkpoint
    progress: bool = True
    resume: bool = True  # resume from the run dir's latest checkpoint; False refuses a dir that holds one
    label: str | None = None  # this run's row name in gdro-report (None: its sampler+allocator)
    samples: SampleConfig = field(default_factory=SampleConfig)  # completions shown (samples/, W&B; gdro.algorithm.samples)

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.seed >= 2**63:
            raise ValueError(f"seed must be < 2**63, got {self.seed}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1, got {self.prompts_per_step}")
        if self.rollouts_per_prompt < 1:
            raise ValueError(f"rollouts_per_prompt must be >= 1, got {self.rollouts_per_prompt}")
        if self.label is not None and not (isinstance(self.label, str) and self.label.strip()):
            raise ValueError(f"label must be a non-empty name or null, got {self.label!r}")
        object.__setattr__(self, "samples", SampleConfig.of(self.samples))
        # a bad or unavailable device fails here, before any model loads
        from gdro.models.loading import check_placement

        check_placement(self.threads, self.device)
