"""I/O errors that say where, in one line: a failed ``write`` or ``fsync`` names no file (a full disk would print
"No space left on device" and nothing else), so every write of a run is wrapped in :func:`named_io`; the entry
points print :func:`one_line` and exit 74 for an error of the machine (:func:`is_environment_error`), keeping the
traceback for gdro's own bugs. The files the commands write are written whole or not at all (:func:`atomic_write`)."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

EXIT_IO_ERROR = 74  # the disk is full, a path is not writable, a file is unreadable (sysexits EX_IOERR)

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


def atomic_write(path: str | Path, write: Callable[[IO[Any]], object], *, binary: bool = False,
                 newline: str | None = None) -> Path:
    """Write ``path`` whole or not at all: ``write(fh)`` fills a temporary file beside it (text, UTF-8, or
    ``binary``), which is flushed to disk and renamed over ``path``; on any error the temporary file goes, ``path`` is
    left as it was (absent: absent, never empty or cut short), and an ``OSError`` names ``path`` (a full disk's
    ``write`` names no file: :func:`named`). A link is followed (its target is replaced, the link stays); a path that
    is not a regular file (a device such as ``/dev/stdout`` or ``/dev/full``, a FIFO, a directory) is opened and
    written in place, as ``open`` would. Returns ``path``."""
    path = Path(path)
    mode, encoding = ("wb", None) if binary else ("w", "utf-8")
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file():
        with named_io(path), open(path, mode, encoding=encoding, newline=newline) as fh:
            write(fh)
        return path
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as err:  # an unwritable or missing directory, a full disk's inodes: named as ``path``
        raise _as_at(err, path) from err
    try:
        with open(fd, mode, encoding=encoding, newline=newline) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(target))  # mkstemp's is 0600: the one ``open`` would give (or the file's own)
        os.replace(tmp, target)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(err, OSError) and err.filename in (None, tmp):
            raise _as_at(err, path) from err
        raise
    return path


def _as_at(err: OSError, path: Path) -> OSError:
    """``err`` as an error at ``path`` (not at the temporary file ``path`` was being written through)."""
    if err.errno is None:
        return err
    return OSError(err.errno, err.strerror or os.strerror(err.errno), str(path))  # the errno's own subclass


def atomic_write_text(path: str | Path, text: str, *, newline: str | None = None) -> Path:
    """:func:`atomic_write` of ``text`` (UTF-8)."""
    return atomic_write(path, lambda fh: fh.write(text), newline=newline)


def _mode_for(target: Path) -> int:
    """The permission bits of the file ``target`` is, else those a new file gets (0666 less the umask)."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
