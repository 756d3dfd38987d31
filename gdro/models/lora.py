"""LoRA adapters (peft) on the trained policy: ``model.lora.r > 0``.

The adapters are injected into the loaded model in place (``peft.inject_adapter_in_model``), so the policy keeps its
own class and every forward layout, kernel and engine sees the model it always did; only the adapters train. The
parts of a run that meet them:

* the reference policy (KL to π_ref) is the same model with its adapters switched off (:class:`BaseView`,
  :func:`reference_model`): no second copy of the weights;
* an engine with weights of its own (vLLM) gets the merged weights ``W + (α/r)·B·A`` at each sync
  (:func:`merged_state_dict`), computed beside the model, which is never merged in place (a merge and unmerge
  would round the base weights);
* a training checkpoint holds the adapters, the optimiser over them and a reference to the base weights with
  their checksum, not the base itself (:mod:`gdro.models.lora_state`): on resume the base is loaded from the model
  dir as at the start, checked against the checksum (a changed base is refused in one line) and the adapters are
  loaded beside it (:func:`add_adapters`' load hook), so a resume is exact; a checkpoint of an older gdro, holding the
  base too, still loads;
* the final save stays a HF dir of the merged weights (``model.name_or_path=<dir>`` loads it, no base needed) and,
  in ``adapter/``, the adapter in PEFT's format (``peft.PeftModel.from_pretrained(base, "<dir>/adapter")``).

:func:`add_adapters` logs once what trains (SmolLM2-135M): ``LoRA r=8 alpha=16 dropout=0 on all-linear ([q_proj,
k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]: 210 layers): 2,442,240 trainable of 136,957,248 parameters
(1.78%)``.

As TRL's ``peft_config`` and verl's ``lora_rank``: ``r`` (0: full fine-tuning), ``alpha``, ``dropout`` and
``target_modules`` (``all-linear``: every linear layer but the output head, or a list of module names).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from gdro.models.lora_state import BASE_REF, is_adapter_key, state_digest

log = logging.getLogger(__name__)

ADAPTER = "default"  # peft's adapter name
ADAPTER_DIR = "adapter"  # the final save's subdirectory holding the adapter (PEFT format)
PEFT_PREFIX = "base_model.model."  # how PeftModel names the wrapped model's weights in a saved adapter


@dataclass(frozen=True)
class LoraSpec:
    """LoRA on the policy (peft): ``r`` > 0 trains rank-``r`` adapters on ``target_modules`` instead of the weights.

    Args:
        r: the adapters' rank; 0 trains every weight (no adapters).
        alpha: the scale numerator: an adapter adds ``(alpha / r) · B·A`` to its layer's weight.
        dropout: dropout on an adapter's input while training.
        target_modules: ``all-linear`` (every linear layer but the output head) or a list of module names
            (``[q_proj, v_proj]``), as peft's ``LoraConfig`` takes them.
    """

    r: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: Any = "all-linear"

    def __post_init__(self) -> None:
        if not isinstance(self.r, int) or isinstance(self.r, bool) or self.r < 0:
            raise ValueError(f"r must be an int >= 0 (0: no adapters), got {self.r!r}")
        if not isinstance(self.alpha, (int, float)) or isinstance(self.alpha, bool) or not self.alpha > 0:
            raise ValueError(f"alpha must be a number > 0, got {self.alpha!r}")
        if not isinstance(self.dropout, (int, float)) or isinstance(self.dropout, bool) or not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout!r}")
        tm = self.target_modules
        if isinstance(tm, (list, tuple)):
            if not tm or not all(isinstance(m, str) and m.strip() for m in tm):
                raise ValueError(f"target_modules must be 'all-linear' or a non-empty list of module names, got {tm!r}")
            object.__setattr__(self, "target_modules", tuple(tm))
        elif not (isinstance(tm, str) and tm.strip()):
            raise ValueError(f"target_modules must be 'all-linear' or a non-empty list of module names, got {tm!r}")

    @property
    def enabled(self) -> bool:
        return self.r > 0

    @classmethod
    def of(cls, value: Any) -> LoraSpec:
        """A LoraSpec from a config mapping (``model.lora``), an instance, or None (no adapters); an unknown key is
        a ValueError naming it."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"lora must be a mapping with keys r, alpha, dropout, target_modules, got {value!r}")
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in value if k not in known]
        if unknown:
            raise ValueError(f"has no key {unknown[0]!r} (keys: {', '.join(known)})")
        return cls(**{k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in value.items()})


def targets_text(target_modules: Any) -> str:
    """``target_modules`` as the command line writes it: ``[q_proj, v_proj]``, or the string itself."""
    if isinstance(target_modules, (list, tuple)):
        return f"[{', '.join(target_modules)}]"
    return str(target_modules)


def target_problem(model: torch.nn.Module, target_modules: Any) -> str | None:
    """What of ``target_modules`` the modules of ``model`` lack, in one line naming its linear layers (None: every
    name matches, as peft matches it, only layers peft can adapt; ``all-linear`` always). A list names modules by
    their name or its dotted end (peft otherwise passes a name that matches nothing if another matches); a string
    is a regular expression over the full names. Cheap: ``model`` may be on the meta device."""
    from transformers.pytorch_utils import Conv1D

    if target_modules == "all-linear":
        return None
    linear, adaptable = (torch.nn.Linear, Conv1D), (torch.nn.Linear, Conv1D, torch.nn.Embedding, torch.nn.Conv1d,
                                                    torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.MultiheadAttention)
    modules = [(name, m) for name, m in model.named_modules() if name]
    layers = list(dict.fromkeys(name.rpartition(".")[2] for name, m in modules if isinstance(m, linear)))
    if isinstance(target_modules, str):
        import re

        try:
            groups = [(repr(target_modules), [(n, m) for n, m in modules if re.fullmatch(target_modules, n)])]
        except re.error as err:
            return f"{target_modules!r} is not a regular expression ({err})"
    else:
        groups = [(t, [(n, m) for n, m in modules if n == t or n.endswith(f".{t}")]) for t in target_modules]
    bad = []
    for target, matched in groups:
        other = next(((n, m) for n, m in matched if not isinstance(m, adaptable)), None)
        if not matched:
            bad.append(f"{target} {'matches' if isinstance(target_modules, str) else 'names'} no module of the model")
        elif other is not None:
            what = f"matches {other[0]}," if isinstance(target_modules, str) else "is"
            bad.append(f"{target} {what} a {type(other[1]).__name__}, not a linear layer")
    return f"{'; '.join(bad)} (its linear layers, the LoRA targets: {', '.join(layers)})" if bad else None


def add_adapters(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """Inject ``spec``'s adapters into ``model`` in place and freeze everything else; the model keeps its class.
    The adapters' initial values come from torch's generator (B = 0, so the policy starts as the base)."""
    from peft import LoraConfig, inject_adapter_in_model

    tm = spec.target_modules
    problem = target_problem(model, tm)  # (gdro-train checks this before its run dir opens: gdro.compose.build)
    if problem is not None:
        raise ValueError(f"lora.target_modules={tm!r}: {problem}")
    cfg = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
                     target_modules=list(tm) if isinstance(tm, tuple) else tm, bias="none")
    try:
        model = inject_adapter_in_model(cfg, model, adapter_name=ADAPTER)
    except ValueError as err:  # e.g. no module matches target_modules
        raise ValueError(f"lora.target_modules={tm!r}: {' '.join(str(err).split())}") from err
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    model.gdro_lora = cfg  # the config the adapter is saved with
    model.register_load_state_dict_pre_hook(_base_from_model)  # a lean checkpoint's policy state (adapters only)
    log.info("%s", trainable_text(model, spec))
    return model


def trainable_text(model: torch.nn.Module, spec: LoraSpec) -> str:
    """One line of what a LoRA policy trains: ``LoRA r=8 alpha=16 dropout=0 on all-linear ([q_proj, ...]: 210
    layers): N trainable of M parameters (x%)``: the adapted layers' names and count (tied weights counted once)."""
    layers = [name for name, _ in _lora_layers(model)]
    names = list(dict.fromkeys(n.rpartition(".")[2] for n in layers))
    params = list(model.parameters())
    trainable, total = sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)
    return (f"LoRA r={spec.r} alpha={spec.alpha:g} dropout={spec.dropout:g} on {targets_text(spec.target_modules)} "
            f"([{', '.join(names)}]: {len(layers)} layers): {trainable:,} trainable of {total:,} parameters "
            f"({100 * trainable / max(total, 1):.2f}%)")


class AdapterBaseChanged(ValueError):
    """A LoRA checkpoint's adapters loaded onto base weights other than those they were trained on: one line that
    names the checkpoint (a user error, as gdro.run.checkpoint.CheckpointError is)."""

    label = "checkpoint error"


def _base_from_model(module: torch.nn.Module, state_dict: MutableMapping[str, Any], prefix: str, *_: Any) -> None:
    """``load_state_dict``'s pre-hook of a LoRA policy: a lean policy state (a checkpoint's adapters and, under
    ``BASE_REF``, the checksum of the base they were trained on; gdro.models.lora_state) gets the base weights
    from ``module`` itself, once their checksum is found equal; else one line refuses the resume. A whole state
    (an older checkpoint) loads as it is."""
    ref = state_dict.pop(prefix + BASE_REF, None)
    if ref is None:
        return
    own = {k: t for k, t in module.state_dict().items() if not is_adapter_key(k) and isinstance(t, torch.Tensor)}
    digest = state_digest(own)
    if digest != ref.get("sha256"):
        base = getattr(getattr(module, "config", None), "_name_or_path", None) or "the model"
        raise AdapterBaseChanged(f"{ref.get('checkpoint', 'the checkpoint')}: the base weights changed: its LoRA "
                                 f"adapters were trained on base weights with sha256 {str(ref.get('sha256'))[:16]}... "
                                 f"but {base} loads with {digest[:16]}...; a LoRA checkpoint holds only the adapters, "
                                 "so it resumes only on the base weights it was trained on (the same "
                                 "model.name_or_path or model.fallback dir, unchanged)")
    for k, t in own.items():
        state_dict.setdefault(prefix + k, t)


def has_adapters(model: Any) -> bool:
    return getattr(model, "gdro_lora", None) is not None


def _lora_layers(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


@contextlib.contextmanager
def adapters_off(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` computing as its base (every adapter switched off) inside the block."""
    layers = [m for _, m in _lora_layers(model)]
    for m in layers:
        m.enable_adapters(False)
    try:
        yield model
    finally:
        for m in layers:
            m.enable_adapters(True)


@dataclass(frozen=True)
class BaseView:
    """The reference policy of a LoRA run: the trained model with its adapters off (see :func:`reference_model`)."""

    model: torch.nn.Module


@contextlib.contextmanager
def reference_model(ref: Any) -> Iterator[Any]:
    """The module to run as π_ref: a :class:`BaseView`'s model with its adapters off, anything else as it is."""
    if isinstance(ref, BaseView):
        with adapters_off(ref.model) as base:
            yield base
    else:
        yield ref


def _base_name(name: str) -> str:
    return name.replace(".base_layer.", ".")


def engine_state(model: Any) -> dict[str, torch.Tensor]:
    """The weights an engine that holds its own copy (vLLM, an HF engine of another process) loads from ``model``:
    a LoRA policy's base weights with its adapters merged in, under the base model's names; else its state dict."""
    return merged_state_dict(model) if has_adapters(model) else model.state_dict()


def merged_state_dict(model: torch.nn.Module, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The base model's state dict (its own names) with every adapter merged in: ``W + (α/r)·B·A``; ``model`` is
    not modified. ``dtype`` casts the floating-point tensors (None: as they are)."""
    deltas = {f"{name}.base_layer.weight": m.get_delta_weight(ADAPTER) for name, m in _lora_layers(model)
              if ADAPTER in m.lora_A}
    out = {}
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if ".lora_" in name:
                continue
            if name in deltas:
                t = t + deltas[name].to(t.dtype)
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            out[_base_name(name)] = t.detach()
    return out


def save_adapter(model: torch.nn.Module, path: Path) -> None:
    """The adapter in PEFT's format at ``path`` (``adapter_model.safetensors``, ``adapter_config.json``)."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model, adapter_name=ADAPTER)
    save_file({PEFT_PREFIX + k: v.detach().contiguous() for k, v in state.items()},
              str(path / "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = model.gdro_lora
    base = getattr(getattr(model, "config", None), "_name_or_path", None)
    cfg.base_model_name_or_path = base
    cfg.save_pretrained(str(path))
