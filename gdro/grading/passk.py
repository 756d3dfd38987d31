"""Unbiased pass@k and mean@k estimators (paper Remark 2.2: n rollouts drawn, k the best-of-k statistic).

Given n samples of which c are correct, the unbiased estimator of pass@k (Chen et al., 2021, "Evaluating Large
Language Models Trained on Code") is

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n - c + 1}^{n} (1 - k / i),

where the product form avoids huge binomials and is stable for large n. mean@k is the mean accuracy c / n.
Both work elementwise on numpy arrays (broadcasting n, c, k) and return a Python float for scalar inputs.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mean_at_k", "pass_at_k"]

ArrayLike = int | float | np.ndarray


def _as_int_array(name: str, x: object) -> np.ndarray:
    """Return ``x`` as an int64 array, rejecting non-integer values with a ValueError naming ``name``."""
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(f"{name} must be integer-valued, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not (
        np.all(np.isfinite(arr)) and np.all(arr == np.round(arr))
    ):
        raise ValueError(f"{name} must be integer-valued, got {x!r}")
    return arr.astype(np.int64)


def _pass_at_k_scalar(n: int, c: int, k: int) -> float:
    if c == 0:
        return 0.0
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k(n: ArrayLike, c: ArrayLike, k: ArrayLike) -> float | np.ndarray:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: number of samples (>= 1). c: number of correct samples, ``0 <= c <= n``. k: ``1 <= k <= n``.
            Scalars or broadcastable integer arrays.

    Returns:
        Probability that a uniformly random k-subset of the n samples contains a correct one; 0 when c = 0,
        1 when ``k > n - c``. A float for scalar inputs, else an array of the broadcast shape.

    Raises:
        ValueError: if an argument is not integer-valued, ``k < 1``, ``c < 0``, ``c > n`` or ``k > n``.
    """
    n_a, c_a, k_a = np.broadcast_arrays(_as_int_array("n", n), _as_int_array("c", c), _as_int_array("k", k))
    if np.any(k_a < 1):
        raise ValueError(f"k must be >= 1, got {k}")
    if np.any(c_a < 0):
        raise ValueError(f"c must be >= 0, got {c}")
    if np.any(c_a > n_a):
        raise ValueError(f"c must be <= n, got c={c}, n={n}")
    if np.any(k_a > n_a):
        raise ValueError(f"k must be <= n, got k={k}, n={n}")
    out = np.empty(n_a.shape, dtype=np.float64)
    for idx in np.ndindex(n_a.shape):
        out[idx] = _pass_at_k_scalar(int(n_a[idx]), int(c_a[idx]), int(k_a[idx]))
    return float(out) if out.ndim == 0 else out


def mean_at_k(c: ArrayLike, n: ArrayLike) -> float | np.ndarray:
    """mean@k: the mean accuracy ``c / n`` of ``n`` samples with ``c`` correct (elementwise).

    Raises:
        ValueError: if ``n < 1``, ``c < 0`` or ``c > n``.
    """
    c_a, n_a = np.broadcast_arrays(np.asarray(c, dtype=np.float64), np.asarray(n, dtype=np.float64))
    if np.any(~(n_a >= 1)):
        raise ValueError(f"n must be >= 1, got {n}")
    if np.any(~(c_a >= 0)):
        raise ValueError(f"c must be >= 0, got {c}")
    if np.any(c_a > n_a):
        raise ValueError(f"c must be <= n, got c={c}, n={n}")
    out = c_a / n_a
    return float(out) if out.ndim == 0 else out
