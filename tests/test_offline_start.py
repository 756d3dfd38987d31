"""A hub model with a local copy (``model.fallback``, model=smollm2-135m) on a machine whose hub cannot be reached, and
``HF_HUB_OFFLINE`` not set (issue #49, item 4): the local copy is used within seconds, with one log line naming the
weights, and no retries of huggingface_hub (before: five retries with back-off, ~23 s, each warning printed twice).

The unreachable hub is real, and the same on every machine, with or without network: ``HF_ENDPOINT`` (huggingface_hub's
``constants.ENDPOINT``) pointing at a local port where nothing listens (refused at once), or at a socket that accepts
connections and never answers (a firewall that drops packets, a hanging resolver)."""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import huggingface_hub.constants as hub_constants
import pytest

from gdro.algorithm.tracking import read_metrics
from gdro.models import source
from gdro.models.loading import ModelSpec
from gdro.models.source import TINY_DIR, hub_unreachable, model_path, model_provenance
from tests.conftest import FAST, REPO

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed: a connection is refused


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


@contextlib.contextmanager
def _answering_server() -> Iterator[int]:
    """A local HTTP server that answers every request with 404 (a hub that is there, without the model)."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """An empty Hugging Face cache, HF_HUB_OFFLINE not set, and a hub endpoint where nothing listens."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)  # (tests/conftest.py sets it before the import)
    monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    source._model_path.cache_clear()
    yield cache
    source._model_path.cache_clear()


@pytest.fixture
def online(monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)  # (tests/conftest.py sets it before the import)


def test_a_refused_connection_is_told_at_once(online, monkeypatch):
    monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    t0 = time.monotonic()
    why = hub_unreachable(HUB_ID)
    assert why is not None and "ConnectError" in why
    assert time.monotonic() - t0 < 2.0


def test_a_hub_that_never_answers_is_given_the_probe_timeout_only(online, monkeypatch):
    with _silent_server() as port:
        monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{port}")
        t0 = time.monotonic()
        why = hub_unreachable(HUB_ID, timeout=1.0)
        elapsed = time.monotonic() - t0
    assert why is not None and elapsed < 2.0, (why, elapsed)


def test_a_hub_that_answers_is_reachable_whatever_it_answers(online, monkeypatch):
    with _answering_server() as port:
        monkeypatch.setattr(hub_constants, "ENDPOINT", f"http://127.0.0.1:{port}")
        assert hub_unreachable(HUB_ID, timeout=5.0) is None


def test_an_unreachable_hub_reads_the_fallback_in_seconds_with_one_line(no_hub, caplog):
    spec = ModelSpec(HUB_ID, max_prompt_len=64, max_new_tokens=8, fallback=str(TINY_DIR))
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO):
        assert model_path(spec) == str(TINY_DIR)
    assert time.monotonic() - t0 < 5.0
    assert not [r for r in caplog.records if r.name.startswith("huggingface_hub")]  # no retry, no warning of its own
    lines = [r.getMessage() for r in caplog.records if r.name == "gdro.models.source"]
    assert len(lines) == 1 and "the hub cannot be reached: ConnectError" in lines[0] and str(TINY_DIR) in lines[0]
    assert model_provenance(spec)["fallback_used"] is True


@pytest.mark.slow
def test_gdro_train_without_a_hub_starts_from_the_fallback_without_retries(tmp_path):
    """A whole ``gdro-train`` run of a hub id whose fallback is the shipped tiny model, HF_HUB_OFFLINE not set."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env |= {"PYTHONPATH": str(REPO), "WANDB_MODE": "disabled", "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
            "HF_HUB_CACHE": str(tmp_path / "hub")}
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "gdro.cli.train", *FAST, "steps=1", "threads=1", f"model.name_or_path={HUB_ID}",
                          f"model.fallback={TINY_DIR}", f"hydra.run.dir={run}"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    said = out.stdout + out.stderr
    assert "Retrying" not in said and "thrown while requesting" not in said
    lines = [x for x in said.splitlines() if "cannot be had here" in x]
    assert len(lines) == 1 and "the hub cannot be reached" in lines[0] and str(TINY_DIR) in lines[0]
    assert [r["step"] for r in read_metrics(run) if r.get("step")] == [1]
