"""A user's own reward functions, as a user writes them for TRL (``f(prompts, completions, **kwargs)``): the ones
tests/test_reward_functions.py names on the command line (``reward.functions=[{fn: tests.user_rewards:...}]``)."""

from __future__ import annotations

import time

CALLS: list[dict] = []  # what each call of ``recorder`` received (in-process tests read it)


def _text(completion):
    return completion[-1]["content"] if isinstance(completion, list) else completion


def short_answer(prompts, completions, **kwargs):
    """1.0 for a completion of at most 20 characters, else 0.0 (a format-style term)."""
    return [1.0 if len(_text(c)) <= 20 else 0.0 for c in completions]


def recorder(prompts, completions, completion_ids, **kwargs):
    """Records its arguments; 0.5 for every row but None (not applicable) for the first."""
    CALLS.append({"prompts": list(prompts), "completions": list(completions), "completion_ids": list(completion_ids),
                  **{k: list(v) for k, v in kwargs.items()}})
    return [None] + [0.5] * (len(completions) - 1)


def raises(prompts, completions, **kwargs):
    """Raises on every second completion (the rest score 1.0)."""
    if len(completions) > 1 or len(_text(completions[0])) % 2 == 0:
        raise RuntimeError("my reward is broken")
    return [1.0]


def spins(prompts, completions, **kwargs):
    """Never returns: computes for ever."""
    while True:
        pass


def sleeps(prompts, completions, **kwargs):
    """Never returns: waits for ever (a server that does not answer)."""
    while True:
        time.sleep(3600)


def wrong_length(prompts, completions, **kwargs):
    return [1.0] * (len(completions) + 1)


def nan(prompts, completions, **kwargs):
    return [float("nan")] * len(completions)


def not_a_number(prompts, completions, **kwargs):
    return ["1.0"] * len(completions)


def level_correct(prompts, completions, level=None, **kwargs):
    """A correctness of a user's own: 1.0 where the completion contains the row's ``solution`` column."""
    sols = kwargs.get("solution") or kwargs.get("answer")
    return [1.0 if str(s) in _text(c) else 0.0 for c, s in zip(completions, sols)]


def numpy_and_bools(prompts, completions, **kwargs):
    """Values as a user's code often has them: a bool, NumPy scalars, a torch scalar (TRL reads each as a float)."""
    import numpy as np
    import torch

    return [True, np.float32(0.5), torch.tensor(2.0)][: len(completions)]
