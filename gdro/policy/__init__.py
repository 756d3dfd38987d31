"""The policy side of a GRPO step (paper Eq. 4–7), one job per file:

- ``update``: :func:`ppo_update` — epochs, mini-batches, gradient accumulation, clipping;
- ``config``: :class:`OptimConfig` — the optimiser, the schedule and the forward switches (conf/optim);
- ``forward``: :class:`Forward` — how the forwards run, bound once: its :meth:`~Forward.plan` and log-probs;
- ``layouts``: one sequence per row, and the shared-prompt KV cache; ``packing``: each group one packed span;
- ``kernels``: the float32 log-softmax, chunked at a large vocabulary, and the ending every layout shares;
- ``microbatch``: cutting rows into micro-batches, by rows or tokens, in whole groups.
"""

from gdro.policy.config import OptimConfig
from gdro.policy.forward import Forward
from gdro.policy.layouts import completion_logprobs
from gdro.policy.update import ppo_update

__all__ = ["Forward", "OptimConfig", "completion_logprobs", "ppo_update"]
