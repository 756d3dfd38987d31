"""Filling a filesystem, for the tests that run gdro on a full disk. Their child processes (run with the repo as
their working directory, often inside ``unshare -rm``) import it as ``tests.fill_disk``."""

from __future__ import annotations

import os


def fill(ballast: str | os.PathLike, spare: int = 0) -> None:
    """Write ``ballast`` until its filesystem takes no byte more (in 1 MiB, then 4 KiB, then 1-byte writes); then
    give ``spare`` bytes of it back."""
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    os.write(fd, b"x" * size)
            except OSError:
                pass
        if spare:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - spare))
    finally:
        os.close(fd)
