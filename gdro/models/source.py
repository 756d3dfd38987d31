"""Where a model's weights are read from: its name resolved (``tiny``, the rehearsal model, a hub id or a local
dir), the hub asked whether the model can be had here, the local copy ``model.fallback`` used where it cannot, and
what run.json records of it (:func:`model_provenance`).

Where a fallback is configured, the hub is first probed once, with a single request of at most
``_PROBE_TIMEOUT_S`` seconds and no retries (:func:`hub_unreachable`): a machine without network (no DNS, no route,
a firewall) starts from its local copy within seconds, with one log line naming the weights, instead of after
huggingface_hub's five retries with back-off (~23 s of warnings, issue #49)."""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

TINY_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny-copy"


class WeightsSource(Protocol):
    """What of a :class:`gdro.models.loading.ModelSpec` says where its weights are."""

    name_or_path: str
    revision: str | None
    fallback: str | None


def resolve_path(name_or_path: str) -> str:
    """``"tiny"`` → the shipped checkpoint directory; ``"qwen3-rehearsal"`` → the rehearsal model (Qwen3's
    architecture, vocabulary and real tokenizer, random weights; built once on first use, :mod:`gdro.models.qwen3`);
    anything else unchanged (hub id or local path)."""
    if name_or_path in ("qwen3-rehearsal", "qwen3-1.7b-random"):
        from gdro.models.qwen3 import build_rehearsal_model

        return str(build_rehearsal_model(name=name_or_path))
    return str(TINY_DIR) if name_or_path == "tiny" else name_or_path


_HUB_TIMEOUT_S = 10.0  # how long the hub may take to answer whether a model is there, before the fallback is used


def model_path(spec: WeightsSource) -> str:
    """Where ``spec``'s model is read from: :func:`resolve_path` of ``name_or_path``, or ``spec.fallback`` when
    ``name_or_path`` is a hub id that cannot be had (:func:`hub_problem`). Decided once per process (cached), so
    a run's tokenizer, policy and engine all read the same weights; the choice is logged."""
    return _model_path(spec.name_or_path, spec.revision, spec.fallback)


@functools.cache
def _model_path(name_or_path: str, revision: str | None, fallback: str | None) -> str:
    path = resolve_path(name_or_path)
    if fallback is None or Path(path).is_dir():
        return path
    problem = hub_problem(path, revision)
    if problem is None:
        return path
    log.warning("model %s cannot be had here (%s): using its local copy %s (model.fallback%s)", path, problem,
                fallback, _what(fallback))
    return fallback


def _what(local_dir: str) -> str:
    """``: <what>`` of a local copy's ``gdro_source.json`` (how gdro built it: scripts/get_smollm2.py), else ''."""
    try:
        what = json.loads((Path(local_dir) / "gdro_source.json").read_text(encoding="utf-8")).get("what")
    except (OSError, ValueError, AttributeError):
        return ""
    return f": {what}" if isinstance(what, str) and what else ""


def hub_problem(repo_id: str, revision: str | None = None) -> str | None:
    """Why the hub model ``repo_id`` cannot be had here, in a few words (None: its ``config.json`` is in the local
    Hugging Face cache, or the hub answered within ``_HUB_TIMEOUT_S``). A hub that cannot be reached at all
    (:func:`hub_unreachable`) is told in seconds, before huggingface_hub's own download would retry it for ~23 s."""
    from huggingface_hub import hf_hub_download, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str):
            return None
    except ValueError as err:  # not a valid repo id
        return f"not a hub id: {err}"
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on"):
        return "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"
    unreachable = hub_unreachable(repo_id, revision)
    if unreachable is not None:
        return f"not in the local Hugging Face cache, and the hub cannot be reached: {unreachable}"
    try:
        hf_hub_download(repo_id, "config.json", revision=revision, etag_timeout=_HUB_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 -- any failure to fetch (network, auth, a missing repo) means "not here"
        return f"not in the local cache, and fetching it failed: {type(err).__name__}"
    return None


_PROBE_TIMEOUT_S = 3.0  # how long the one request of hub_unreachable may take (DNS, connect and answer together)


def hub_unreachable(repo_id: str, revision: str | None = None, timeout: float = _PROBE_TIMEOUT_S) -> str | None:
    """Why the hub cannot be reached from here, in a few words (None: it answered, whatever the answer): one HEAD
    request for ``repo_id``'s ``config.json`` through huggingface_hub's own client (its endpoint, ``HF_ENDPOINT``,
    proxies and headers), no retries, given ``timeout`` seconds in all -- a resolver that hangs included (the request
    runs in a daemon thread)."""
    from urllib.parse import quote

    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    url = f"{constants.ENDPOINT}/{repo_id}/resolve/{quote(revision or constants.DEFAULT_REVISION, safe='')}/config.json"
    outcome: list[BaseException | None] = []

    def ask() -> None:
        try:
            get_session().request("HEAD", url, timeout=timeout, follow_redirects=False)
            outcome.append(None)
        except Exception as err:  # noqa: BLE001 -- any failure to get an answer means "unreachable"
            outcome.append(err)

    thread = threading.Thread(target=ask, name="gdro-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"no answer from {constants.ENDPOINT} within {timeout:g} s"
    err = outcome[0]
    return None if err is None else f"{type(err).__name__}: {' '.join(str(err).split()) or 'no detail'}"


def model_provenance(spec: WeightsSource) -> dict[str, Any]:
    """What run.json records about the weights: the name asked for, the path read, whether ``model.fallback`` was
    used, and a local dir's ``gdro_source.json`` (how gdro built it, with checksums: scripts/get_smollm2.py)."""
    path = model_path(spec)
    out: dict[str, Any] = {"name_or_path": spec.name_or_path, "path": path,
                           "fallback_used": spec.fallback is not None and path == spec.fallback}
    source = Path(path) / "gdro_source.json"
    if source.is_file():
        try:
            out["source"] = json.loads(source.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            out["source"] = f"unreadable: {err}"
    return out
