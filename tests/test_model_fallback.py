"""``model.fallback``: a hub id where it can be had, a local copy elsewhere (model=smollm2-135m), and run.json's
``model`` record of which weights were read. The hub is never reached here: offline, the decision rests on the real
Hugging Face cache (an empty one, and one holding the model's ``config.json`` in the hub's own layout)."""

from __future__ import annotations

import shutil

import huggingface_hub.constants as hub_constants
import pytest

from gdro.models import source
from gdro.models.loading import ModelSpec, ModelUnavailableError, load_model
from gdro.models.source import TINY_DIR, model_path, model_provenance
from tests.conftest import compose_cfg

HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, offline; the per-process choice forgotten before and after."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source._model_path.cache_clear()
    yield cache
    source._model_path.cache_clear()


def _spec(**kw) -> ModelSpec:
    return ModelSpec(**({"name_or_path": HUB_ID, "max_prompt_len": 64, "max_new_tokens": 8} | kw))


def test_an_unreachable_hub_model_reads_its_fallback_and_says_so(hub_cache, caplog):
    spec = _spec(fallback=str(TINY_DIR))
    with caplog.at_level("WARNING", logger="gdro.models.source"):
        assert model_path(spec) == str(TINY_DIR)
    assert "HF_HUB_OFFLINE is set" in caplog.text and str(TINY_DIR) in caplog.text
    model, tokenizer = load_model(spec)  # the fallback's real weights and tokenizer
    assert model.config.vocab_size >= len(tokenizer) and tokenizer.padding_side == "left"
    assert model_provenance(spec) == {"name_or_path": HUB_ID, "path": str(TINY_DIR), "fallback_used": True}


def test_without_a_fallback_the_hub_model_is_unavailable_as_before(hub_cache):
    spec = _spec()
    assert model_path(spec) == HUB_ID
    with pytest.raises(ModelUnavailableError, match="HF_HUB_OFFLINE"):
        load_model(spec)


def test_a_cached_hub_model_wins_over_the_fallback(hub_cache):
    """The hub's layout: models--org--name/snapshots/<commit>/ and refs/main naming the commit."""
    repo = hub_cache / ("models--" + HUB_ID.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    shutil.copy(TINY_DIR / "config.json", repo / "snapshots" / commit / "config.json")
    spec = _spec(fallback=str(TINY_DIR))
    assert model_path(spec) == HUB_ID
    assert model_provenance(spec)["fallback_used"] is False


def test_a_missing_fallback_says_how_to_build_it(hub_cache, tmp_path):
    spec = _spec(fallback=str(tmp_path / "smollm2-135m-instruct"))
    with pytest.raises(ModelUnavailableError, match="model.fallback.*scripts/get_smollm2.py"):
        load_model(spec)


def test_a_local_dir_never_asks_the_hub(hub_cache, tmp_path):
    assert model_path(_spec(name_or_path="tiny", fallback=str(tmp_path))) == str(TINY_DIR)


def test_a_bad_fallback_names_the_key():
    with pytest.raises(ValueError, match="fallback"):
        _spec(fallback=" ")


def test_the_smollm2_preset_asks_the_hub_first_and_falls_back_to_the_built_copy(monkeypatch):
    monkeypatch.setenv("GDRO_SMOLLM2_DIR", "/somewhere/smollm2")
    cfg = compose_cfg(["model=smollm2-135m"])
    assert cfg.model.name_or_path == HUB_ID and cfg.model.fallback == "/somewhere/smollm2"
