"""Training checkpoints for exact resume, written atomically.

A checkpoint is a directory ``<run_dir>/checkpoints/step_NNNNNN/`` holding

* ``policy.pt`` — the policy's ``state_dict``; of a LoRA policy only its adapters and a reference to the base
  weights with their checksum (format 2, :mod:`gdro.models.lora_state`; the reference also in ``meta.json``'s
  ``lora_base``), checked against the weights loaded on resume;
* ``optimizer.pt`` — the optimiser's and the LR schedule's ``state_dict``;
* ``trainer.pt`` — the step, the classifier / sampler / allocator state (the sampler's holds the data order) and
  every RNG stream (the trainer's numpy generators and torch's CPU and CUDA generators);
* ``meta.json`` — the step, the resolved config the run was started with, the byte length of ``metrics.jsonl``
  after the step's row (the logger's position, read before the model loads) and the format version.

Writes are atomic (:func:`atomic_dir`): everything goes into a hidden temporary directory beside the final one, each
file is flushed to disk, and only then is the directory renamed to its final name (``os.rename`` is atomic on
POSIX). A process killed at any moment therefore leaves either the new checkpoint complete or no trace of it (a
stale temporary directory, removed by the next save) — the previous checkpoint is always loadable. Older
checkpoints are deleted only after the new one is in place, keeping the newest ``keep``. A write that fails (a full
disk) removes its temporary directory, and its error names the file. The final policy, ``<run_dir>/checkpoint``, is
written the same way, with a marker naming its step (:func:`final_step`).

The ``.pt`` files are pickles (``torch.save``) written by this run; load only checkpoints you wrote yourself.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gdro.common.ioerrors import named_io
from gdro.models.lora_state import BASE_REF, lean_policy_state

FORMAT_VERSION = 1
LEAN_FORMAT_VERSION = 2  # a LoRA policy's checkpoint: adapters and a reference to the base (older gdro refuse it)
READABLE_FORMATS = (FORMAT_VERSION, LEAN_FORMAT_VERSION)
CKPT_ROOT = "checkpoints"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"
_OLD_PREFIX = ".old-"
FINAL_DIR = "checkpoint"  # the final policy (a HF model dir) in the run dir
FINAL_MARKER = "gdro_final.json"  # inside it: the step it holds, written last before the rename


@dataclass(frozen=True)
class CheckpointConfig:
    """Checkpointing (the `checkpoint:` node of conf/train.yaml)."""

    every: int = 25  # save every N steps (0 = no periodic checkpoints)
    keep: int = 2  # newest checkpoints kept on disk
    at_end: bool = True  # save after the last step too

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"every must be >= 0 (0 = no periodic checkpoints), got {self.every}")
        if self.keep < 1:
            raise ValueError(f"keep must be >= 1, got {self.keep}")

    def due(self, step: int, last_step: int) -> bool:
        """Whether the periodic schedule or the end of training asks for a checkpoint after ``step``."""
        return bool((self.every and step % self.every == 0) or (self.at_end and step == last_step))


def step_dirname(step: int) -> str:
    return f"step_{step:06d}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run dir as (step, path), oldest first (temporary dirs are never listed)."""
    root = Path(run_dir) / CKPT_ROOT
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (p / "meta.json").is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


class CheckpointError(ValueError):
    """A checkpoint that cannot be read (damaged on disk, or edited): the message names it and what to do."""

    label = "checkpoint error"

    def __init__(self, ckpt: Path, what: str, err: BaseException | None = None):
        """``what`` of ``ckpt`` is unreadable because of ``err``; without ``err``, ``what`` is the whole reason."""
        if err is None:
            super().__init__(f"{ckpt}: {what}")
            return
        older = [p for _, p in list_checkpoints(ckpt.parent) if p != ckpt]
        hint = f"; move it aside to resume from {older[-1].name}" if older else ""
        super().__init__(f"{ckpt}: {what} is unreadable ({type(err).__name__}: {' '.join(str(err).split())}){hint}")


def read_meta(ckpt: str | Path) -> dict[str, Any]:
    """``meta.json`` of a checkpoint: ``step``, ``config`` (resolved), ``format_version``."""
    ckpt = Path(ckpt)
    try:
        meta = json.loads((ckpt / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CheckpointError(ckpt, "meta.json", err) from err
    if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
        raise CheckpointError(ckpt, "meta.json", ValueError("not a checkpoint's meta.json (no step)"))
    if not isinstance(meta.get("config"), dict):  # what a resume compares the command's config with
        raise CheckpointError(ckpt, "meta.json", ValueError("not a whole checkpoint's meta.json (no config)"))
    return meta


def check_whole(ckpt: str | Path) -> None:
    """Refuse, in one line, a checkpoint whose ``.pt`` files are cut short (no zip directory at the end: a copy or
    a write stopped midway) or damaged inside (a record whose CRC-32 no longer matches: torch.load itself would load
    such a tensor without a word), before a resume is accepted, so that the refusal leaves the run dir as it was.
    Each file is read once more for it (zlib's CRC-32: well over 1 GB/s)."""
    import zipfile

    ckpt = Path(ckpt)
    for path in sorted(ckpt.glob("*.pt")):
        try:
            with zipfile.ZipFile(path) as zf:
                bad = zf.testzip()
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as err:
            raise CheckpointError(ckpt, path.name, err) from err
        if bad is not None:
            raise CheckpointError(ckpt, path.name, ValueError(f"damaged inside: record {bad} fails its CRC-32 check"))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Recording:
    """A file's ``write`` that keeps the OSError it raised: torch.save's zip writer reports a failed write (a full
    disk) only as a RuntimeError ("unexpected pos") that names neither the cause nor the file."""

    def __init__(self, fh: Any):
        self.fh, self.error = fh, None

    def write(self, data: bytes) -> int:
        try:
            return self.fh.write(data)
        except OSError as err:
            self.error = err
            raise

    def flush(self) -> None:
        self.fh.flush()


def _write(path: Path, obj: Any) -> None:
    """One file of a checkpoint, flushed to disk before returning (an I/O error names the file)."""
    with named_io(path), path.open("wb") as fh:
        if path.suffix == ".json":
            fh.write(json.dumps(obj, indent=1, default=str).encode("utf-8"))
        else:
            out = _Recording(fh)
            try:
                torch.save(obj, out)
            except RuntimeError as err:
                if out.error is None:
                    raise
                raise out.error from err
        fh.flush()
        os.fsync(fh.fileno())


_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how safetensors (Rust) spells the errno of an I/O error


@contextmanager
def named_weights_io(model_dir: str | Path) -> Iterator[None]:
    """Raise an I/O error that safetensors reports as a ``SafetensorError`` (not an ``OSError``: "Error while
    serializing: I/O error: No space left on device (os error 28)", naming no file) as the ``OSError`` it wraps,
    naming the weights file being written (else ``model_dir``)."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as err:
        code = _OS_ERROR.search(str(err))
        if code is None:
            raise
        errno_ = int(code.group(1))
        raise OSError(errno_, os.strerror(errno_), _weights_file(err) or str(model_dir)) from err


def _weights_file(err: BaseException) -> str | None:
    """The file a failed safetensors save was writing: the ``filename`` its ``save_file`` frame was called with
    (safetensors writes a temporary file and removes it on an error, so nothing on disk names it)."""
    found, tb = None, err.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_locals.get("filename")
        if isinstance(name, (str, os.PathLike)) and str(name).endswith(".safetensors"):
            found = str(name)
        tb = tb.tb_next
    return found


def _fsync_tree(root: Path) -> None:
    for p in sorted(root.rglob("*"), reverse=True):
        if p.is_file():
            with named_io(p):
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
    _fsync_dir(root)


@contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Write a directory as a whole: the body fills the temporary directory it is given; on success it is flushed
    to disk and renamed to ``final`` (an existing ``final`` is renamed aside first and removed after), on an error
    it is removed. A kill at any moment leaves ``final`` either as it was or complete, never partial -- or absent,
    between the two renames, when it existed before; the stale temporary dirs are removed by the next call.
    """
    final = Path(final)
    parent = final.parent
    with named_io(parent):
        parent.mkdir(parents=True, exist_ok=True)
    clear_leftovers(final)
    tmp = parent / f"{_TMP_PREFIX}{final.name}-{os.getpid()}"
    with named_io(tmp):
        tmp.mkdir()
    try:
        yield tmp
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # frees the space a failed write took (a full disk)
        raise
    old = parent / f"{_OLD_PREFIX}{final.name}-{os.getpid()}"
    with named_io(final):
        if final.exists():
            os.rename(final, old)
        os.rename(tmp, final)
        _fsync_dir(parent)
    shutil.rmtree(old, ignore_errors=True)


def clear_leftovers(final: str | Path) -> None:
    """Remove what a process killed inside :func:`atomic_dir` left beside ``final``: a temporary dir, or the
    previous version renamed aside."""
    final = Path(final)
    for stale in [*final.parent.glob(f"{_TMP_PREFIX}{final.name}-*"), *final.parent.glob(f"{_OLD_PREFIX}{final.name}-*")]:
        shutil.rmtree(stale, ignore_errors=True)


def final_step(run_dir: str | Path) -> int | None:
    """The step of the final policy in ``<run_dir>/checkpoint`` (None: none, or one saved without the marker, by
    an older gdro or in place)."""
    try:
        return int(json.loads((Path(run_dir) / FINAL_DIR / FINAL_MARKER).read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_checkpoint(run_dir: str | Path, step: int, files: Mapping[str, Any], meta: Mapping[str, Any], *,
                    keep: int) -> Path:
    """Write ``files`` (name → object, each ``torch.save``d as ``<name>.pt``) and ``meta.json`` atomically.

    A LoRA policy (``files["policy"]`` holds adapters) is written lean: its adapters and a reference to its base
    weights (:func:`gdro.models.lora_state.lean_policy_state`), format :data:`LEAN_FORMAT_VERSION`. Returns the
    checkpoint's path. Saving a step that already has a checkpoint leaves the existing one.
    """
    root = Path(run_dir) / CKPT_ROOT
    final = root / step_dirname(step)
    if final.is_dir() and (final / "meta.json").is_file():
        return final
    for stale in root.glob(f"{_TMP_PREFIX}*"):  # left by a process killed mid-write
        shutil.rmtree(stale, ignore_errors=True)
    version, lean = FORMAT_VERSION, lean_policy_state(files["policy"]) if "policy" in files else None
    if lean is not None:
        files, version = {**files, "policy": lean[0]}, LEAN_FORMAT_VERSION
        meta = {**meta, "lora_base": _base_record(lean[1], meta.get("config"))}
    with atomic_dir(final) as tmp:
        for name, obj in files.items():
            _write(tmp / f"{name}.pt", obj)
        _write(tmp / "meta.json", {"format_version": version, "step": step, **meta})
    for _, old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _base_record(ref: dict[str, Any], config: Any) -> dict[str, Any]:
    """meta.json's ``lora_base``: the base weights' reference and which model they were read as (run.json's
    ``model`` says which dir and the dir's file checksums, scripts/get_smollm2.py)."""
    model = config.get("model") if isinstance(config, Mapping) else None
    named = {k: model.get(k) for k in ("name_or_path", "revision", "fallback")} if isinstance(model, Mapping) else {}
    return {**ref, **named}


def load_checkpoint(ckpt: str | Path, names: tuple[str, ...]) -> dict[str, Any]:
    """The objects saved under ``names`` (``<name>.pt``), on the CPU. A lean LoRA policy's base reference is given
    the checkpoint's path (for the one line that refuses a changed base, gdro.models.lora)."""
    ckpt = Path(ckpt)
    meta = read_meta(ckpt)
    if meta.get("format_version") not in READABLE_FORMATS:
        raise CheckpointError(ckpt, "its format", ValueError(f"format {meta.get('format_version')}, this gdro reads "
                                                             f"{', '.join(map(str, READABLE_FORMATS))}"))
    out = {}
    for n in names:
        try:
            out[n] = torch.load(ckpt / f"{n}.pt", map_location="cpu", weights_only=False)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as err:  # truncated, damaged, missing
            raise CheckpointError(ckpt, f"{n}.pt", err) from err
    ref = out["policy"].get(BASE_REF) if isinstance(out.get("policy"), Mapping) else None
    if isinstance(ref, dict):
        ref["checkpoint"] = str(ckpt)
    return out
