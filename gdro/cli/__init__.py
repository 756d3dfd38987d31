"""The entry points: ``gdro-train`` (``train``), ``gdro-eval`` (``evaluate``), ``gdro-rescore`` (``rescore``),
``gdro-report`` (``report``), their console scripts (``entry``: the Ctrl-C handler first) and what they share (``app``)."""
