"""Portable CPU mode: ``GDRO_PORTABLE=1`` pins every instruction-set choice gdro's numbers depend on to AVX2, so that a
seed gives the same bits on any x86-64 CPU with AVX2 (the same software stack and one thread assumed).

Why: at a fixed seed, float results on the CPU depend on the code path the libraries pick for the machine, and a
last-bit difference in step 1 becomes another training trajectory within tens of steps (docs/results.md, "The
machine question"). The paths, and what pins each:

- ATen's own kernels (elementwise ops, reductions, softmax, the RNG's vectorised paths) dispatch per CPU to
  ``DEFAULT`` / ``AVX2`` / ``AVX512``: ``ATEN_CPU_CAPABILITY=avx2``.
- MKL (torch's CPU BLAS: every ``nn.Linear``) picks kernels per CPU and vendor: ``MKL_CBWR=AVX2,STRICT``, MKL's
  conditional numerical reproducibility on the AVX2 path, strict (bitwise, whatever the thread count), and
  ``MKL_ENABLE_INSTRUCTIONS=AVX2`` for MKL's functions outside CNR.
- oneDNN (torch's mkldnn ops): ``ONEDNN_MAX_CPU_ISA=AVX2``.
- NumPy's SIMD dispatch (the controllers' math): ``NPY_ENABLE_CPU_FEATURES`` limited to the AVX2 level (X86_V3).
- Threads: a reduction split over threads sums in another order. One thread (``OMP_NUM_THREADS=1``,
  ``MKL_NUM_THREADS=1``); ``threads`` must then be null or 1.

Everything here must be set before torch and numpy load: :func:`apply` runs when ``gdro`` is imported (the first
import of every entry point), and refuses in one line when torch or numpy was imported first with other settings.
What it cannot pin: the versions of Python, torch, numpy, transformers and glibc (run.json's ``versions``), and CPUs
without AVX2/FMA (ATen falls back to its ``DEFAULT`` path there). Its cost in step time: docs/results.md.
"""

from __future__ import annotations

import os
import shlex
import sys

SWITCH = "GDRO_PORTABLE"

# set before torch and numpy load; each pins one library's choice of code path (module docstring)
ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NPY_ENABLE_CPU_FEATURES": "SSE SSE2 SSE3 SSSE3 SSE41 POPCNT SSE42 X86_V2 AVX F16C FMA3 AVX2 X86_V3",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


class PortableError(RuntimeError):
    """GDRO_PORTABLE=1 cannot hold in this process (a library loaded first, or a thread count above 1)."""


def enabled(environ: os._Environ | dict | None = None) -> bool:
    value = (os.environ if environ is None else environ).get(SWITCH, "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise PortableError(f"{SWITCH}={value!r}: use 1 (portable CPU mode) or 0")


def apply() -> None:
    """With ``GDRO_PORTABLE=1``: set :data:`ENV` in this process's environment (inherited by its children). Torch or
    numpy already imported with other settings is a :class:`PortableError`: their code paths are chosen at load."""
    if not enabled():
        return
    late = [name for name in ("torch", "numpy") if name in sys.modules]
    differ = [k for k, v in ENV.items() if os.environ.get(k) != v]
    if late and differ:
        raise PortableError(
            f"{SWITCH}=1 must take effect before {' and '.join(late)} load{'s' if len(late) == 1 else ''}: import gdro "
            f"first, or set {' '.join(f'{k}={shlex.quote(ENV[k])}' for k in differ)} in the environment")
    os.environ.update(ENV)


def check_threads(threads: int | None) -> None:
    """Portable mode runs one thread: ``threads`` must be null or 1 (a ValueError naming the key otherwise)."""
    if enabled() and threads not in (None, 1):
        raise ValueError(f"{SWITCH}=1 runs one thread (a reduction split over threads sums in another order); drop "
                         "threads= or set threads=1")


def describe() -> dict[str, object]:
    """For run.json's ``machine``: whether portable mode is on, and the dispatch settings this process runs with."""
    return {"portable": enabled(), "dispatch_env": {k: os.environ[k] for k in ENV if k in os.environ}}
