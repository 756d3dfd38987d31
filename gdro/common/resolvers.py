"""OmegaConf resolvers the configs use, registered when gdro is imported.

``${gdro.mul:a,b}``: the product of two integers, e.g. ``allocator.n_max: ${gdro.mul:3,${rollouts_per_prompt}}``
(conf/method/: the allocators' arms [n_min, 3 × n̄], the paper's rule, at whatever n̄ a preset sets).
"""

from __future__ import annotations

from omegaconf import OmegaConf


def _mul(a: object, b: object) -> int:
    for x in (a, b):
        if isinstance(x, bool) or not isinstance(x, int):
            raise TypeError(f"gdro.mul takes integers, got {x!r}")
    return int(a) * int(b)  # type: ignore[call-overload]


def register() -> None:
    OmegaConf.register_new_resolver("gdro.mul", _mul, replace=True)
