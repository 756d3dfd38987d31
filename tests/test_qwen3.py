"""Qwen3's real tokenizer, built offline (gdro/models/qwen3.py), held to the real tokenizer's published ids."""

from __future__ import annotations

import pytest

from gdro.data.benchmark_specs import MATH_SUFFIX
from gdro.models.qwen3 import ADDED_TOKENS, VOCAB_ROWS, build_tokenizer

# The three sequences of transformers' Qwen2 tokenizer integration test (tests/models/qwen2/
# test_tokenization_qwen2.py, test_tokenizer_integration) and the ids the real Qwen tokenizer gives them there.
SEQUENCES = [
    ("Transformers (formerly known as pytorch-transformers and pytorch-pretrained-bert) provides "
     "general-purpose architectures (BERT, GPT-2, RoBERTa, XLM, DistilBert, XLNet...) for Natural "
     "Language Understanding (NLU) and Natural Language Generation (NLG) with over 32+ pretrained "
     "models in 100+ languages and deep interoperability between Jax, PyTorch and TensorFlow."),
    "🤗 Transformers 提供了可以轻松地下载并且训练先进的预训练模型的 API 和工具。使用预训练模型可以减少计算消耗和碳排放，并且节省从头训练所需要的时间和资源。",
    ("""```python\ntokenizer = AutoTokenizer.from_pretrained("Qwen/Qwen-tokenizer")\n"""
     """tokenizer("世界，你好！")```"""),
]
EXPECTED = [
    [8963, 388, 320, 69514, 3881, 438, 4510, 27414, 32852, 388, 323, 4510, 27414, 21334, 35722, 1455, 529, 8, 5707,
     4586, 58238, 77235, 320, 61437, 11, 479, 2828, 12, 17, 11, 11830, 61437, 64, 11, 1599, 10994, 11, 27604, 321,
     33, 529, 11, 29881, 6954, 32574, 369, 18448, 11434, 45451, 320, 45, 23236, 8, 323, 18448, 11434, 23470, 320,
     30042, 38, 8, 448, 916, 220, 18, 17, 10, 80669, 4119, 304, 220, 16, 15, 15, 10, 15459, 323, 5538, 94130, 2897,
     1948, 619, 706, 11, 5355, 51, 21584, 323, 94986, 13],
    [144834, 80532, 93685, 83744, 34187, 73670, 104261, 29490, 62189, 103937, 104034, 102830, 98841, 104034, 104949,
     9370, 5333, 58143, 102011, 1773, 37029, 98841, 104034, 104949, 73670, 101940, 100768, 104997, 33108, 100912,
     105054, 90395, 100136, 106831, 45181, 64355, 104034, 113521, 101975, 33108, 85329, 1773],
    [73594, 12669, 198, 85593, 284, 8979, 37434, 6387, 10442, 35722, 445, 48, 16948, 45274, 16948, 34841, 3135, 1138,
     85593, 445, 99489, 3837, 108386, 6313, 899, 73594],
]


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_ids_equal_the_real_tokenizers_on_the_published_sequences(tok):
    for text, ids in zip(SEQUENCES, EXPECTED):
        assert tok(text)["input_ids"] == ids
        assert tok.decode(ids) == text


def test_vocabulary_and_special_tokens_at_their_ids(tok):
    assert len(tok) == 151_643 + len(ADDED_TOKENS) == 151_669 <= VOCAB_ROWS
    ids = tok.convert_tokens_to_ids([t for t, _ in ADDED_TOKENS])
    assert ids == list(range(151_643, 151_669))
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]) == [
        151_643, 151_644, 151_645, 151_667, 151_668]
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"  # Qwen3-*-Base: eos and pad are <|endoftext|>
    assert tok("<|im_start|>user\n2+2<|im_end|>")["input_ids"][0] == 151_644  # never split into characters
    assert tok.decode([151_643, 151_667], skip_special_tokens=True) == "<think>"  # <think> is not "special"


def test_digits_are_single_tokens_and_the_suffix_is_15_tokens(tok):
    assert tok("389192")["input_ids"] == [18, 23, 24, 16, 24, 17]
    assert len(tok(MATH_SUFFIX)["input_ids"]) == 15


def test_chat_template_is_qwen3s_for_rl_conversations(tok):
    user = [{"role": "user", "content": "What is 2+2?"}]
    assert tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True, enable_thinking=False) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    both = [{"role": "system", "content": "Be brief."}, *user, {"role": "assistant", "content": "4"}]
    assert tok.apply_chat_template(both, tokenize=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4<|im_end|>\n")
