"""The seams at the bottom: plain records and Protocols (``interfaces``, ``rollouts``), the composed config's checks
(``validate``), atomic writes and I/O errors, the Ctrl-C handler, the portable CPU mode, config resolvers, and the
table of module paths that moved (``moved``)."""
