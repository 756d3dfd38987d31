"""What keeps a local model directory from loading, in one line, found before transformers fails far from the
cause -- or loads it wrong without a word: a save cut short, truncated or corrupt weights, a ``config.json`` of
another model size (a tensor's shape, the number of layers) or that contradicts itself or is no JSON object, a
tokenizer file that does not parse, a tokenizer without its ``tokenizer_config.json`` or its ``eos_token``, a chat
template that is missing, empty, not UTF-8 or does not work (issue #52)."""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
VOCAB_FILES = ("vocab.json", "tokenizer.model", "spiece.model", "vocab.txt")  # a tokenizer's vocabulary without tokenizer.json


def model_dir_problem(path: str | Path) -> str | None:
    """What keeps a local model directory from loading, in one line (None: it looks complete, or it is no local
    directory). A save cut short leaves ``config.json`` without weights or tokenizer: transformers would then fail
    far from the cause (a chat-template error)."""
    path = Path(path)
    if not path.is_dir():
        return None
    names = {p.name for p in path.iterdir()}
    missing = missing_parts(path)
    if "run.json" in names:
        return f"{str(path)!r} is a gdro run dir; its final policy is {str(path / 'checkpoint')!r}"
    if len(missing) == 3:
        return None  # no model dir at all (from_pretrained's own message says so)
    if missing:
        return (f"{str(path)!r} is not a complete model directory: no {' and no '.join(missing)} (a save cut short? "
                "rerunning the gdro-train command that wrote it finishes it)")
    return config_problem(path) or weights_problem(path)


def missing_parts(path: str | Path) -> list[str]:
    """The parts of a HF model dir that ``path`` lacks: ``config.json``, ``weights``, ``tokenizer`` (no tokenizer
    file at all) or ``tokenizer_config.json`` (a vocabulary without it: the tokenizer loads, but with another
    class's special tokens and no chat template -- a model that then scores 0 without a word); none: all there.
    What a load requires, so the final save's check too (gdro.run.lifecycle)."""
    names = {p.name for p in Path(path).iterdir()}
    missing = [what for what, files in (("config.json", ("config.json",)), ("weights", WEIGHT_FILES),
                                        ("tokenizer", (*TOKENIZER_FILES, *VOCAB_FILES))) if not names & set(files)]
    if "tokenizer" not in missing and "tokenizer_config.json" not in names:
        missing.append("tokenizer_config.json")
    return missing


def config_problem(path: Path) -> str | None:
    """What in model dir ``path``'s ``config.json`` keeps it from loading, in one line (None: nothing found): JSON
    that does not parse, a ``num_hidden_layers`` that is not the length of ``layer_types`` (transformers refuses it
    while loading the tokenizer, and would blame the tokenizer files)."""
    file = path / "config.json"
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        return f"{str(file)!r} is unreadable, truncated or corrupt ({' '.join(str(err).split())})"
    if not isinstance(config, dict):
        return f"{str(file)!r} is not a model config (a JSON {_json_kind(config)}, not an object)"
    for part in (config, config.get("text_config")):
        layers, types = (part.get("num_hidden_layers"), part.get("layer_types")) if isinstance(part, dict) else (0, 0)
        if isinstance(layers, int) and isinstance(types, list) and len(types) != layers:
            key = "" if part is config else "text_config."
            return (f"{str(file)!r} contradicts itself: {key}num_hidden_layers is {layers} but {key}layer_types lists "
                    f"{len(types)} layers")
    return None


def _json_kind(value: object) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")


def chat_template_problem(path: str, tokenizer) -> str | None:
    """Why ``tokenizer`` (of model ``path``) has no chat template that formats a prompt, in one line naming the file
    it came from (None: it formats one user turn, as every prompt of a run is formatted). For a run that formats
    its prompts with it (``model.use_chat_template``): none at all (no file, a ``chat_template.jinja`` that is a
    directory), an empty one, one that does not parse or render, or renders without the user's message. Checked
    once the tokenizer loads: transformers compiles a template when first used, where a broken one is a traceback
    (an empty one renders an empty prompt)."""
    template = tokenizer.chat_template
    jinja = Path(path) / "chat_template.jinja"
    if template is None:
        if jinja.is_dir():
            return f"{str(jinja)!r} is a directory, not a chat template (model.use_chat_template is true)"
        where = repr(path) if Path(path).is_dir() else f"model {path!r}"
        return (f"{where} has no chat template (no chat_template.jinja, and tokenizer_config.json sets none) but "
                "model.use_chat_template is true: add one, or set model.use_chat_template=false to give the prompts "
                "as raw text")
    file = next((Path(path) / name for name in CHAT_TEMPLATE_FILES if (Path(path) / name).is_file()), None)
    named = repr(str(file)) if file else "its chat template"
    if isinstance(template, str) and not template.strip():
        return f"{named} is not a working chat template (it is empty)"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "1 + 1"}], add_generation_prompt=True,
                                             tokenize=False)
    except Exception as err:  # noqa: BLE001 (whatever rendering raises: the template, or what it raises itself)
        why = f"{type(err).__name__}: {' '.join(str(getattr(err, 'message', None) or err).split())}"
        if getattr(err, "lineno", None):
            why += f", line {err.lineno}"
        return f"{named} is not a working chat template ({why})"
    if "1 + 1" not in str(text):
        return f"{named} is not a working chat template (a user message rendered through it is gone: {text!r:.120})"
    return None


def template_file_problem(path: str | Path) -> str | None:
    """A ``chat_template.jinja`` of model dir ``path`` that is not UTF-8 text (transformers fails on it while
    loading the tokenizer, and would blame the tokenizer), in one line; None otherwise."""
    file = Path(path) / "chat_template.jinja"
    try:
        file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        return f"{str(file)!r} is not UTF-8 text ({err.reason} at byte {err.start})"
    except OSError:
        return None
    return None


def weights_problem(path: str | Path) -> str | None:
    """The first weights file of model dir ``path`` that cannot load, in one line (None: none found). Cheap,
    nothing is loaded: a ``*.safetensors`` file's header and length; a ``*.bin`` file's zip directory (at its end:
    a truncated ``torch.save`` file has none), or, for the legacy format (no zip), its first byte."""
    from safetensors import SafetensorError, safe_open

    def unreadable(weights: Path, why: object) -> str:
        return f"{str(weights)!r} is unreadable, truncated or corrupt ({' '.join(str(why).split())})"

    path = Path(path)
    for weights in sorted(path.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt"):
                pass
        except (SafetensorError, OSError) as err:
            return unreadable(weights, err)
    for weights in sorted(path.glob("*.bin")):
        try:
            if zipfile.is_zipfile(weights):
                with zipfile.ZipFile(weights):
                    continue
            with weights.open("rb") as fh:
                if fh.read(1) != b"\x80":  # a legacy torch.save file is a pickle: it opens with PROTO
                    return unreadable(weights, "not a whole torch.save file: no zip directory at its end (cut short?)")
        except (zipfile.BadZipFile, OSError) as err:
            return unreadable(weights, err)
    return None


def tokenizer_problem(path: str, err: BaseException) -> str:
    """Why the tokenizer of model dir ``path`` does not load, in one line: a ``chat_template.jinja`` that is not
    UTF-8, the first of its JSON files that does not parse (a truncated or corrupt ``tokenizer.json``), else ``err``
    itself."""
    problem = template_file_problem(path)
    if problem is not None:
        return problem
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "vocab.json"):
        file = Path(path) / name
        if file.is_file():
            try:
                json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as bad:
                return f"{str(file)!r} is unreadable, truncated or corrupt ({' '.join(str(bad).split())})"
    present = [name for name in TOKENIZER_FILES if (Path(path) / name).is_file()]
    return (f"its tokenizer ({', '.join(present) or 'no tokenizer file'}) does not load "
            f"({type(err).__name__}: {' '.join(str(err).split())})")


def shape_mismatch(path: str, keys: set[tuple[str, tuple[int, ...], tuple[int, ...]]]) -> str:
    """One line for weights whose shapes are not those ``config.json`` gives (``(key, in the weights, by the
    config)``)."""
    key, weights, config = min(keys)
    more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
    return (f"{str(Path(path) / 'config.json')!r} does not match its weights: {key} is {list(weights)} in the "
            f"weights but {list(config)} by config.json{more} (a config.json of another model size?)")


def missing_weights(path: str, keys: Iterable[str]) -> str:
    """One line for weights the model ``config.json`` builds but the weights files do not hold (transformers would
    start them from random values and say so only in its load report)."""
    keys = sorted(keys)
    more = f" and {len(keys) - 1} more" if len(keys) > 1 else ""
    return (f"{str(Path(path) / 'config.json')!r} does not match its weights: {keys[0]}{more} is not in the weights "
            "(it would start from random values; a config.json of another model?)")


def special_tokens_problem(path: str, tokenizer) -> str | None:
    """A tokenizer without the special token a run cannot do without, in one line (None: it has it): an
    ``eos_token``, which ends every completion (without it generation runs to the length limit and scores 0)."""
    if tokenizer.eos_token is not None:
        return None
    where = repr(str(Path(path) / "tokenizer_config.json")) if Path(path).is_dir() else f"the tokenizer of {path!r}"
    return f"{where} names no eos_token (the token that ends a completion): add one, e.g. \"eos_token\": \"<|im_end|>\""


def shape_problem(path: str | Path, trust_remote_code: bool = False) -> str | None:
    """Weights of model dir ``path`` whose shapes are not those its ``config.json`` gives (a config.json of another
    model size), in one line; None when they match or cannot be compared. Cheap, no weight is read: the model
    built on the meta device against the shapes the weights files record (``*.safetensors`` headers, a zip
    ``*.bin``'s tensor records), for the names both have. (Checked before loading: transformers would draw its
    progress bar and log a table of many lines, then raise.)"""
    from transformers import AutoConfig, AutoModelForCausalLM

    files = sorted(Path(path).glob("*.safetensors")) or sorted(p for p in Path(path).glob("*.bin")
                                                                if zipfile.is_zipfile(p))
    if not files:
        return None
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        if getattr(config, "quantization_config", None):
            return None  # packed weights: their stored shapes are not the layers' shapes
        with torch.device("meta"):
            skeleton = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
        expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
        stored = dict(_stored_shapes(files))
    except Exception:  # noqa: BLE001 (not comparable here: from_pretrained says what is wrong, if anything)
        return None
    mismatched = {(key, shape, expected[key]) for key, shape in stored.items()
                  if key in expected and expected[key] != shape}
    return layer_count_problem(str(path), stored, expected) or (
        shape_mismatch(str(path), mismatched) if mismatched else None)


def spec_shape_problem(spec) -> str | None:
    """:func:`shape_problem` of the local model dir a :class:`gdro.models.loading.ModelSpec` reads (None: it fits,
    or the model is no local dir): gdro-train checks it before its run dir opens (loading checks it again)."""
    from gdro.models.source import model_path

    path = model_path(spec)
    return shape_problem(path, spec.trust_remote_code) if Path(path).is_dir() else None


_LAYER = re.compile(r"\.layers\.(\d+)\.")


def layer_count_problem(path: str, stored: Iterable[str], expected: Iterable[str]) -> str | None:
    """One line for weights that hold another number of decoder layers than the model ``config.json`` builds
    (``num_hidden_layers`` edited, or of another model size): transformers would load the layers both have, start the
    others from random values or drop them, and say so only in its load report. None: the counts agree (or the
    names hold no ``.layers.N.``)."""
    def count(keys: Iterable[str]) -> int:
        return len({m.group(1) for key in keys if (m := _LAYER.search(key))})

    held, built = count(stored), count(expected)
    if held == built or not held or not built:
        return None
    return (f"{str(Path(path) / 'config.json')!r} does not match its weights: num_hidden_layers is {built} but the "
            f"weights hold {held} layers (a config.json of another model size?)")


def _stored_shapes(files: list[Path]) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor in the weights ``files``, reading no tensor data."""
    from safetensors import safe_open

    for weights in files:
        if weights.suffix == ".safetensors":
            with safe_open(str(weights), framework="pt") as fh:
                for key in fh.keys():  # noqa: SIM118 (a safe_open handle is not iterable)
                    yield key, tuple(fh.get_slice(key).get_shape())
        else:  # mapped, onto the meta device: the records only
            state = torch.load(weights, mmap=True, weights_only=True, map_location="meta")
            yield from ((key, tuple(t.shape)) for key, t in state.items() if isinstance(t, torch.Tensor))

