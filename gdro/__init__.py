"""gdro: GRPO with Prompt-GDRO and Rollout-GDRO. Importing it applies the portable CPU mode when ``GDRO_PORTABLE=1``
and registers the config resolvers (gdro/common/resolvers.py)."""

from __future__ import annotations

import sys

from gdro.common import moved, portable, resolvers

try:  # GDRO_PORTABLE=1: pin the CPU code paths before torch and numpy load (gdro/common/portable.py)
    portable.apply()
except portable.PortableError as _err:
    print(f"gdro: {_err}", file=sys.stderr)
    raise SystemExit(2) from None

moved.install()  # old module paths (#50) still import, with a DeprecationWarning (gdro/common/moved.py)
resolvers.register()  # ${gdro.mul:...} in conf/method/ (gdro/common/resolvers.py)
