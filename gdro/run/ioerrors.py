"""I/O errors that say where, in one line: a failed ``write`` or ``fsync`` names no file (a full disk would print
"No space left on device" and nothing else), so every write of a run is wrapped in :func:`named_io`; the entry
points print :func:`one_line` and exit 74 for an error of the machine (:func:`is_environment_error`), keeping the
traceback for gdro's own bugs."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

# OSErrors that are the machine's state, not a bug, even when they name no file
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EFBIG, errno.ENOLCK, errno.ESTALE}


def is_environment_error(err: OSError) -> bool:
    """An OSError of the machine (a full disk, a read-only or missing path), not of gdro's code: it names a file
    (gdro names the file of every write: :func:`named_io`) or its errno says so."""
    return err.filename is not None or err.errno in _ENVIRONMENT_ERRNOS


def one_line(err: BaseException) -> str:
    """An error as one line: an ``OSError`` as ``<what> (<ERRNO>): <path>``, anything else as its message."""
    if isinstance(err, OSError) and err.errno in errno.errorcode and err.strerror and not hasattr(err, "label"):
        where = f": {err.filename}" + (f" -> {err.filename2}" if err.filename2 else "") if err.filename else ""
        return f"{err.strerror} ({errno.errorcode[err.errno]}){where}"
    return " ".join(str(err).split()) or type(err).__name__


def named(err: OSError, path: str | Path) -> OSError:
    """``err`` with ``path`` as its filename if it has none (a failed ``write`` or ``fsync`` names no file)."""
    if err.filename is not None or err.errno is None:
        return err
    return OSError(err.errno, err.strerror or os.strerror(err.errno), str(path))  # the errno's own subclass


@contextlib.contextmanager
def named_io(path: str | Path) -> Iterator[None]:
    """Re-raise an ``OSError`` raised in the body with ``path`` as its filename when it names none, so that "No
    space left on device" says where."""
    try:
        yield
    except OSError as err:
        new = named(err, path)
        if new is err:
            raise
        raise new from err


def check_creatable(path: str | Path) -> None:
    """Raise, naming the directory at fault, the ``OSError`` that creating directory ``path`` would raise (a file
    in the way, a read-only or unwritable parent), without creating anything."""
    path = Path(path).absolute()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
    if not os.access(existing, os.W_OK | os.X_OK):
        code = errno.EROFS if os.statvfs(existing).f_flag & os.ST_RDONLY else errno.EACCES
        raise OSError(code, os.strerror(code), str(existing))
