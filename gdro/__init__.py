"""gdro: GRPO with Prompt-GDRO and Rollout-GDRO. Importing it applies the portable CPU mode when ``GDRO_PORTABLE=1``."""

from __future__ import annotations

import sys

from gdro import portable

try:  # GDRO_PORTABLE=1: pin the CPU code paths before torch and numpy load (gdro/portable.py)
    portable.apply()
except portable.PortableError as _err:
    print(f"gdro: {_err}", file=sys.stderr)
    raise SystemExit(2) from None
