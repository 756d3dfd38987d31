"""The embedded task (copy digits into \\boxed{}) and the tiny model: real tokenizer, real Qwen3, no mocks."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import importlib.util
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch

from gdro.common.interfaces import Problem
from gdro.data.prompts import format_prompt
from gdro.data.synthetic import CopyTask, copy_completion, from_hf_dataset, to_hf_dataset
from gdro.models.loading import ModelSpec, ModelUnavailableError, load_model
from gdro.models.source import TINY_DIR
from gdro.models.tiny import build_tiny, build_tokenizer, chat_affixes, encode_sft_batch

SMALL = CopyTask(train_size=3000)


# --------------------------------------------------------------------------------------------------------------
# Task
# --------------------------------------------------------------------------------------------------------------
def test_problem_format():
    p = CopyTask().test()[-1]
    assert p.prompt == "Copy: " + " ".join(p.answer) + "."
    assert len(p.answer) == p.level and set(p.answer) <= set("123456789")
    assert copy_completion("389192") == "\\boxed{389192}"


def test_splits_are_deterministic_and_seeded():
    assert SMALL.train() == CopyTask(train_size=3000).train()
    assert SMALL.test() == CopyTask(train_size=3000).test()
    other = CopyTask(train_size=3000, seed=7)
    assert [p.answer for p in other.train()] != [p.answer for p in SMALL.train()]
    assert [p.answer for p in other.test()] != [p.answer for p in SMALL.test()]


def test_splits_are_disjoint_and_sft_excludes_test():
    task = CopyTask()
    test = task.test()
    # level 1 (9 strings, fewer than test_per_level) is the one documented shared level; all others are disjoint
    assert [level for level in range(1, 9) if task.is_shared(level)] == [1]
    held_out = {p.answer for p in test if p.level > 1}
    assert held_out == task.test_strings()
    assert held_out.isdisjoint(p.answer for p in task.train())
    assert held_out.isdisjoint(p.answer for p in task.sample_problems(5000, np.random.default_rng(0)))
    assert {p.level for p in task.train()} == {p.level for p in test} == set(range(1, 9))
    # with a small held-out quota level 1 is split too: 4 digits held out, the other 5 for training
    small = CopyTask(test_per_level=5, train_size=500)
    assert not small.is_shared(1)
    ones = {p.answer for p in small.test() if p.level == 1}
    assert len(ones) == 4 and ones.isdisjoint(p.answer for p in small.train())


def test_test_split_is_uniform_and_large_enough():
    task = CopyTask()
    test = task.test()
    counts = Counter(p.level for p in test)
    assert len(test) >= 300
    assert len({p.answer for p in test}) == len(test)  # no duplicates within the held-out split
    assert counts[1] == 9 and counts[2] == 40  # a shared level holds its whole space; L=2 holds out half
    assert all(counts[level] == task.test_per_level for level in range(3, 9))


def test_uids_unique_and_stable_across_processes():
    train, test = SMALL.train(), SMALL.test()
    uids = [p.uid for p in train] + [p.uid for p in test]
    assert len(set(uids)) == len(uids)
    assert train[123].uid == "copy/train/000123" and test[0].uid == "copy/test/000000"
    code = ("import json; from gdro.data.synthetic import CopyTask; t = CopyTask(train_size=3000);"
            "print(json.dumps([[p.uid, p.prompt] for p in t.train()[:50] + t.test()[-50:]]))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == [[p.uid, p.prompt] for p in train[:50] + test[-50:]]


def test_train_levels_are_heavy_tailed():
    task = CopyTask()
    counts = Counter(p.level for p in task.train())
    freq = np.array([counts[level] for level in range(1, 9)]) / task.train_size
    assert np.all(np.diff(freq) < 0)  # most problems easy ...
    assert freq[-2:].sum() > 0.05  # ... with a long tail of hard ones
    np.testing.assert_allclose(freq, task.level_probs(), rtol=0, atol=1 / task.train_size)  # largest remainder
    np.testing.assert_allclose(task.level_probs(), (1 / np.arange(1, 9)) / (1 / np.arange(1, 9)).sum())


@pytest.mark.parametrize("dist", ["geometric", "uniform"])
def test_other_level_distributions(dist):
    task = CopyTask(level_dist=dist, geo_p=0.5, train_size=2000)
    probs = task.level_probs()
    assert probs.sum() == pytest.approx(1.0)
    if dist == "uniform":
        np.testing.assert_allclose(probs, 1 / 8)
    else:
        np.testing.assert_allclose(probs[1:] / probs[:-1], 0.5)
    assert len(task.train()) == 2000


@pytest.mark.parametrize("key,value", [
    ("min_level", 0), ("max_level", 0), ("train_size", 0), ("test_per_level", 0), ("level_dist", "pareto"),
    ("zipf_a", 0.0), ("geo_p", 1.5), ("seed", -1),
])
def test_task_validation_names_the_key(key, value):
    with pytest.raises(ValueError, match=key):
        CopyTask(**{key: value})


def test_parquet_export_round_trip(tmp_path):
    import datasets

    paths = SMALL.save_splits(tmp_path)
    for split, problems in (("train", SMALL.train()), ("test", SMALL.test())):
        ds = datasets.load_dataset("parquet", data_files=str(paths[split]), split="train")
        assert from_hf_dataset(ds) == problems
    assert from_hf_dataset(to_hf_dataset(SMALL.test())) == SMALL.test()


# --------------------------------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_tokenizer_round_trip_and_specials(tok):
    texts = [p.prompt for p in SMALL.test()] + [copy_completion(p.answer) for p in SMALL.test()]
    texts += ["The answer is \\boxed{42}, since {x} = 1 + 2!", "  two  spaces\tand\nnewline ~|^"]
    for text in texts:
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    for special in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "\\boxed{", "Copy:"):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1, special
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    ids = tok("\\boxed{12}<|im_end|>", add_special_tokens=False)["input_ids"]
    assert ids[-1] == tok.eos_token_id and tok.decode(ids, skip_special_tokens=True) == "\\boxed{12}"


def test_chat_template(tok):
    text = format_prompt(tok, "Copy: 3 8.", use_chat_template=True)
    assert text == "<|im_start|>user\nCopy: 3 8.<|im_end|>\n<|im_start|>assistant\n"
    assert chat_affixes(tok) == ("<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
    assert format_prompt(tok, "Copy: 3 8.", use_chat_template=False) == "Copy: 3 8."


def test_tokenizer_reloads_identically(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(str(tmp_path))
    again = AutoTokenizer.from_pretrained(str(tmp_path))
    texts = [format_prompt(tok, p.prompt, True) + copy_completion(p.answer) for p in SMALL.test()[::10]]
    assert again(texts)["input_ids"] == tok(texts)["input_ids"]
    assert again.get_vocab() == tok.get_vocab()
    assert again.chat_template == tok.chat_template and again.eos_token_id == tok.eos_token_id


def test_sft_batch_matches_chat_tokenisation_and_masks_prompt(tok):
    problems = SMALL.test()[::40]
    batch = encode_sft_batch(tok, problems)
    for i, p in enumerate(problems):
        full = format_prompt(tok, p.prompt, True) + copy_completion(p.answer) + tok.eos_token
        ids = tok(full, add_special_tokens=False)["input_ids"]
        n = int(batch["attention_mask"][i].sum())
        assert batch["input_ids"][i, :n].tolist() == ids
        target = [t for t in batch["labels"][i].tolist() if t != -100]
        assert tok.decode(target) == copy_completion(p.answer) + tok.eos_token


# --------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------
def _greedy_answers(model, tokenizer, problems: list[Problem], max_new_tokens: int) -> list[str]:
    texts = [format_prompt(tokenizer, p.prompt, True) for p in problems]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=False, max_new_tokens=max_new_tokens)
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def test_shipped_tiny_model_loads_and_solves_easy_levels():
    from transformers import Qwen3ForCausalLM

    assert (TINY_DIR / "model.safetensors").is_file() and (TINY_DIR / "gdro_build.json").is_file()
    model, tokenizer = load_model(ModelSpec("tiny", max_prompt_len=64, max_new_tokens=12))
    assert isinstance(model, Qwen3ForCausalLM)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id is not None
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert 0.5e6 < sum(p.numel() for p in model.parameters()) < 1.5e6
    easy = [p for p in CopyTask().test() if p.level <= 3][::4]
    answers = _greedy_answers(model, tokenizer, easy, max_new_tokens=12)
    assert answers == [copy_completion(p.answer) for p in easy]


def test_build_tiny_runs_and_loads(tmp_path):
    out = build_tiny(tmp_path / "tiny", sft_steps=3, batch_size=16, warmup=2, progress=False)
    record = json.loads((out / "gdro_build.json").read_text())
    assert record["args"]["sft_steps"] == 3 and "transformers" in record["versions"]
    model, tokenizer = load_model(ModelSpec(str(out), max_prompt_len=64, max_new_tokens=4, dtype="bfloat16"))
    assert next(model.parameters()).dtype == torch.bfloat16
    assert sum(p.numel() for p in model.parameters()) == record["num_params"]
    assert tokenizer.get_vocab() == build_tokenizer().get_vocab() and tokenizer.padding_side == "left"
    enc = tokenizer([format_prompt(tokenizer, "Copy: 1.", use_chat_template=True)], return_tensors="pt",
                    add_special_tokens=False)
    out_ids = model.generate(**enc, do_sample=False, max_new_tokens=4)
    assert enc["input_ids"].shape[1] < out_ids.shape[1] <= enc["input_ids"].shape[1] + 4


@pytest.mark.parametrize("key,kwargs", [
    ("name_or_path", {"name_or_path": " "}), ("max_prompt_len", {"max_prompt_len": 0}),
    ("max_new_tokens", {"max_new_tokens": -1}), ("dtype", {"dtype": "float8"}),
    ("attn_implementation", {"attn_implementation": ""}), ("revision", {"revision": ""}),
])
def test_model_spec_validation_names_the_key(key, kwargs):
    base = {"name_or_path": "tiny", "max_prompt_len": 64, "max_new_tokens": 12}
    with pytest.raises(ValueError, match=key):
        ModelSpec(**(base | kwargs))


def test_hub_kernels_are_off_unless_asked_for():
    """transformers 5 turns ``use_kernels`` on by default where the ``kernels`` package is installed, and then swaps
    layers for kernels fetched from the hub when the model is put in train mode on CUDA: offline, the first GPU run
    failed there (docs/gpu.md). gdro loads the model's own layers unless ``model.hub_kernels`` asks."""
    base = {"name_or_path": "tiny", "max_prompt_len": 64, "max_new_tokens": 12}
    assert load_model(ModelSpec(**base))[0].use_kernels is False
    import transformers

    if int(transformers.__version__.split(".")[0]) >= 5 and importlib.util.find_spec("kernels") is not None:
        assert load_model(ModelSpec(**base, hub_kernels=True))[0].use_kernels is True
    with pytest.raises(TypeError, match="hub_kernels"):
        ModelSpec(**base, hub_kernels="yes")


def test_unavailable_hub_model_gives_clear_error(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time
    with pytest.raises(ModelUnavailableError, match="Qwen/Qwen3-1.7B-Base") as info:
        load_model(ModelSpec("Qwen/Qwen3-1.7B-Base", max_prompt_len=512, max_new_tokens=64))
    assert "HF_HOME" in str(info.value) and "HF_HUB_OFFLINE" in str(info.value)


def test_missing_local_dir_gives_clear_error(tmp_path):
    with pytest.raises(ModelUnavailableError, match="does not hold a loadable model"):
        load_model(ModelSpec(str(tmp_path / "nothing"), max_prompt_len=64, max_new_tokens=4))


def test_sticky_strings_are_a_share_of_each_level_with_runs_of_repeated_digits():
    """data.sticky_frac: per level (2+ digits, not shared) that share of train and test problems is drawn as a sticky
    chain; levels keep their exact counts, test strings stay distinct and disjoint from train, and the default task
    (sticky_frac 0) is unchanged."""
    from gdro.data.synthetic import adjacent_repeats

    plain, sticky = CopyTask(), CopyTask(sticky_frac=0.5, sticky_p=0.7)
    assert [(p.prompt, p.answer) for p in CopyTask(sticky_frac=0.0).train()] == \
        [(p.prompt, p.answer) for p in plain.train()]
    train, test = sticky.train(), sticky.test()
    assert [p.level for p in test] == [p.level for p in plain.test()]
    assert sorted(p.level for p in train) == sorted(p.level for p in plain.train())
    assert len({p.answer for p in test}) == len(test)
    assert not ({p.answer for p in train} & sticky.test_strings())
    for level in (5, 8):
        rep = [adjacent_repeats(p.answer) for p in test if p.level == level]
        rep_plain = [adjacent_repeats(p.answer) for p in plain.test() if p.level == level]
        # a sticky chain repeats with p = 0.7 (expected 0.7 * (L - 1) repeats), a uniform string with p = 1/9
        assert np.mean(rep) > 0.5 * 0.7 * (level - 1) > 2 * np.mean(rep_plain)
    assert all(adjacent_repeats(p.answer) == 0 for p in test if p.level == 1)
    with pytest.raises(ValueError, match="sticky_frac"):
        CopyTask(sticky_frac=1.5)
    with pytest.raises(ValueError, match="sticky_p"):
        CopyTask(sticky_p=1.0)
