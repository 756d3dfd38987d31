"""Shared helpers of the SmolLM2-135M pilots (docs/smollm2-pilots.md): model loading, tasks, sampling, scoring.

Plain transformers + torch, no gdro import (gdro's modules are being moved while these pilots run). The scoring
follows gdro.grading.rewards' defaults for plain-integer golds: ``answer_mode=boxed`` reads the last complete ``\\boxed{}``
and a completion that did not emit the end token within the length limit scores wrong (``require_eos``).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

MODEL_DIR = Path(os.environ.get("GDRO_SMOLLM2_DIR") or Path.home() / ".cache" / "gdro" / "smollm2-135m-instruct")


def load(dtype=torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (MODEL_DIR / "config.json").is_file():
        raise SystemExit(f"no model in {MODEL_DIR}: run python scripts/get_smollm2.py first")
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=dtype).eval()
    return model, tok


# ---------------------------------------------------------------------------------------------------------------
# Tasks: each yields (prompt, gold, level) triples; held-out sets are drawn from a seeded rng
# ---------------------------------------------------------------------------------------------------------------
BOX = "Put the final answer in \\boxed{}."

TEMPLATES = {
    # addition of two numbers; level = digits of each operand
    "add": lambda a, b: f"What is {a} + {b}? {BOX}",
    "add_short": lambda a, b: f"{a} + {b} = ? Answer with \\boxed{{number}} only.",
    # copy digits (the gdro toy task's wording); level = number of digits
    "copy": lambda s: "Copy: " + " ".join(s) + ". " + BOX,
    "copy_plain": lambda s: "Copy: " + " ".join(s) + ".",
    # larger of two numbers; level = digits
    "max": lambda a, b: f"Which is larger, {a} or {b}? {BOX}",
    # wordings that ask for the box more directly
    "add_example": lambda a, b: f"Compute {a} + {b}. Reply with only the result inside \\boxed{{}}, e.g. \\boxed{{7}}.",
    "add_fewshot": lambda a, b: f"Q: 2 + 5\nA: \\boxed{{7}}\nQ: 4 + 4\nA: \\boxed{{8}}\nQ: {a} + {b}\nA:",
    "copy_example": lambda s: f"Write the number {s} inside \\boxed{{}}, e.g. \\boxed{{42}}.",
    "copy_fewshot": lambda s: f"Q: 3 8 1\nA: \\boxed{{381}}\nQ: {' '.join(s)}\nA:",
}
ADD = ("add", "add_short", "add_example", "add_fewshot")
COPY = ("copy", "copy_plain", "copy_example", "copy_fewshot")


@dataclass(frozen=True)
class Item:
    prompt: str
    gold: str
    level: int


def make_items(task: str, level: int, n: int, rng: np.random.Generator) -> list[Item]:
    out = []
    lo, hi = (0 if level == 1 else 10 ** (level - 1)), 10 ** level
    for _ in range(n):
        if task in ADD:
            a, b = (int(x) for x in rng.integers(lo, hi, size=2))
            out.append(Item(TEMPLATES[task](a, b), str(a + b), level))
        elif task in COPY:
            s = "".join(str(d) for d in rng.integers(1, 10, size=level))
            out.append(Item(TEMPLATES[task](s), s, level))
        elif task == "max":
            a, b = (int(x) for x in rng.integers(lo, hi, size=2))
            while b == a:
                b = int(rng.integers(lo, hi))
            out.append(Item(TEMPLATES[task](a, b), str(max(a, b)), level))
        else:
            raise ValueError(task)
    return out


def heldout(task: str, levels: list[int], per_level: int, seed: int = 1234) -> list[Item]:
    rng = np.random.default_rng(seed)
    return [it for lv in levels for it in make_items(task, lv, per_level, rng)]


# ---------------------------------------------------------------------------------------------------------------
# Scoring
# ---------------------------------------------------------------------------------------------------------------
_BOXED = "\\boxed{"


def last_boxed(text: str) -> str | None:
    """Content of the last complete \\boxed{...} (nested braces balanced), else None."""
    i = text.rfind(_BOXED)
    while i >= 0:
        depth, j = 1, i + len(_BOXED)
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth == 0:
            return text[i + len(_BOXED):j - 1]
        i = text.rfind(_BOXED, 0, i)
    return None


_NUM = re.compile(r"-?\d+")


def norm(ans: str | None) -> str | None:
    if ans is None:
        return None
    a = ans.strip().replace(",", "").replace(" ", "").strip("$.")
    return a


def score(text: str, gold: str, finished: bool) -> dict:
    box = last_boxed(text)
    boxed_ok = norm(box) == gold
    nums = _NUM.findall(text.replace(",", ""))
    return {
        "boxed": box is not None,  # format: a complete \boxed{} present
        "finished": finished,  # the end token was emitted within the limit
        "correct": bool(boxed_ok and finished),  # gdro's reward: boxed, require_eos
        "correct_noeos": bool(boxed_ok),
        "correct_any": bool(nums and nums[-1] == gold),  # last integer in the text (answer_mode=any, roughly)
    }


# ---------------------------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------------------------
def chat_ids(tok, prompts: list[str], system: str | None = None) -> list[list[int]]:
    out = []
    for p in prompts:
        msgs = ([{"role": "system", "content": system}] if system is not None else []) + [{"role": "user", "content": p}]
        out.append(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False))
    return [list(x["input_ids"]) if isinstance(x, dict) else list(x) for x in out]


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(len(r) for r in rows)
    ids = torch.full((len(rows), n), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), n), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, n - len(r):] = torch.tensor(r)
        mask[i, n - len(r):] = 1
    return ids, mask


@torch.no_grad()
def sample(model, tok, prompt_ids: list[list[int]], *, max_new: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
           bf16: bool = False, batch: int = 64, seed: int = 0, min_new: int = 0):
    """Sample one completion per prompt row. Returns (completion id lists, texts, finished flags, seconds).

    A completion ends at (and includes) the first eos id; ``finished`` is False when the limit was hit first.
    """
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    pad = model.generation_config.pad_token_id
    torch.manual_seed(seed)
    comps, texts, fins = [], [], []
    t0 = time.time()
    for s in range(0, len(prompt_ids), batch):
        ids, mask = left_pad(prompt_ids[s:s + batch], pad)
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)
        with ctx:
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=temperature > 0,
                                 temperature=temperature if temperature > 0 else None, top_p=top_p, top_k=top_k,
                                 max_new_tokens=max_new, min_new_tokens=min_new, pad_token_id=pad)
        for row in out[:, ids.shape[1]:].tolist():
            cut = next((i for i, t in enumerate(row) if t in eos_ids), None)
            row = row[:cut + 1] if cut is not None else row
            comps.append(row)
            fins.append(cut is not None)
            texts.append(tok.decode(row, skip_special_tokens=True))
    return comps, texts, fins, time.time() - t0


def load_avg() -> float:
    return os.getloadavg()[0]
