"""``python -m gdro.report SWEEP_DIR``: the same as ``gdro-report``."""

import sys

from gdro.report import main

sys.exit(main())
