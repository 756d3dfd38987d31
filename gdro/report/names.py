"""Sweep report, the names: methods' display names and order (the baseline first), metric keys and their order,
bin labels' order."""

from __future__ import annotations

import re

DISPLAY_NAMES = {
    "uniform+fixed": "GRPO",
    "prompt-gdro+fixed": "Prompt-GDRO",
    "uniform+rollout-gdro": "Rollout-GDRO",
    "prompt-gdro+rollout-gdro": "Prompt+Rollout-GDRO",
    "uniform+sqrt": "Square-root",
    "sqrt": "Square-root",  # the labelled rows of scripts/reproduce_toy.py's presets (an arm-range override)
    "oracle-levels+fixed": "Oracle: uniform over levels (control)",
    "uniform+knapsack": "Knapsack RL",
    "knapsack": "Knapsack RL",
    "rollout-gdro": "Rollout-GDRO",
    "uniform+rollout-gdro-variance": "Rollout-GDRO (variance signal)",
    "rollout-gdro-variance": "Rollout-GDRO (variance signal)",
    "uniform+fixed+dynamic": "Dynamic sampling (DAPO)",
    "dynamic": "Dynamic sampling (DAPO)",
    "learnability+fixed": "Learnability (LILO)",
    "mopps+fixed": "MoPPS",
    "rgdro-frozen": "Rollout-GDRO, μ frozen (released code)",
    "rgdro-paper-preset": "Rollout-GDRO, paper preset (official scores on pg_loss)",
    "rgdro-variance-rest": "Rollout-GDRO, variance signal, μ against the rest mean",
    "uniform+fixed+greso": "Pre-rollout skip (GRESO-style)",
    "skip": "Pre-rollout skip (GRESO-style)",
    "learnability-w2": "Learnability (LILO), window 2",
    "learnability-w4": "Learnability (LILO), window 4",
    "mopps-decay": "MoPPS, λ 0.5, ts_ratio 8",
    "uniform+zero-variance": "Zero-variance control (n_min to all-equal prompts)",
    "joint": "Prompt+Rollout-GDRO",
    "learnability": "Learnability (LILO)",
    "mopps": "MoPPS",
    "prompt-gdro-frontier": "Prompt-GDRO, frontier signal",
    "resample-frontier": "Prompt-GDRO resampling, frontier signal",
    "zero-variance": "Zero-variance control (n_min to all-equal prompts)",
}



METHOD_ORDER = list(DISPLAY_NAMES)



BASELINE = "uniform+fixed"



# eval/[<bench>/](mean|pass)@k[/<sub>]   e.g. eval/pass@8, eval/mean@8/level_3, eval/aime24/pass@16
METRIC_KEY = re.compile(r"^eval/(?:(?P<prefix>.+?)/)?(?P<kind>mean|pass)@(?P<k>\d+)(?:/(?P<sub>.+))?$")



def _natural(s: str) -> tuple:
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", s) if p)



def bin_sort_key(label: str) -> tuple:
    """Numeric bin labels ascending, then non-numeric ones (e.g. ``unseen``) alphabetically."""
    try:
        return (0, float(label), "")
    except ValueError:
        return (1, 0.0, label)



def metric_sort_key(key: str) -> tuple:
    m = METRIC_KEY.match(key)
    if m is None:
        return (2, _natural(key))
    return (
        m["sub"] is not None,
        _natural(m["prefix"] or ""),
        _natural(m["sub"] or "") if m["sub"] else (),
        m["kind"] != "mean",
        int(m["k"]),
    )



def is_headline(key: str) -> bool:
    """An overall metric (``eval/pass@8`` or ``eval/<bench>/pass@8``), not a per-level breakdown."""
    m = METRIC_KEY.match(key)
    return m is not None and m["sub"] is None



def display_name(method: str) -> str:
    """The row's name: ``DISPLAY_NAMES`` of its key, the settings that keep it apart kept (``uniform+rollout-gdro
    [allocator.consumption=realized]`` -> ``Rollout-GDRO [allocator.consumption=realized]``)."""
    base, sep, settings = method.partition(" [")
    return DISPLAY_NAMES.get(base, base) + (sep + settings if sep else "")



def method_rank(method: str) -> tuple:
    """The sort key of a method's rows: :data:`METHOD_ORDER` (the baseline first), then unknown methods by name."""
    base = method.partition(" [")[0]
    return (METHOD_ORDER.index(base), method) if base in METHOD_ORDER else (len(METHOD_ORDER), method)



def metric_label(key: str) -> str:
    """A metric key as tables and figures name it: ``eval/mean@8/level_3`` -> ``mean@8/level_3``."""
    return key.removeprefix("eval/")
