"""Rehearse the paper's path end to end on this machine: the researcher's sequence with everything real but the size.

    python scripts/rehearse_paper.py                              # full: hf and vllm, 1 and 2 processes
    python scripts/rehearse_paper.py --engines hf --steps 1       # the short one CI runs
    python scripts/rehearse_paper.py --device cuda --model qwen3-1.7b-random   # on a lent GPU (docs/gpu.md)

Phases, each timed, with tokens/s and the peak memory (VmHWM) of every process it started:

1. **build**: ``model=qwen3-rehearsal`` (Qwen3's architecture, 151,936-row embedding and real tokenizer, random
   seeded weights; gdro/models/qwen3.py).
2. **checks**, what a Qwen user gets wrong: the exact prompt text and token count fed to the model for one DAPO and
   one MATH-500 problem; how many prompts ``model.max_prompt_len`` drops; that generation stops on Qwen's stop
   tokens (``<|endoftext|>`` and ``<|im_end|>``) and a completion without one is cut at the length limit and scored
   as truncated; that the text the reward sees is the decoded completion.
3. **train**, per engine (``rollout=hf|vllm``) and process count (1, or 2 under torchrun): the three paper presets as
   one Hydra multirun (``experiment=paper,paper-prompt-gdro,paper-rollout-gdro model=qwen3-rehearsal``) on the DAPO
   sample with MATH-500 held out, W&B offline (one group per sweep). A 1-process run samples ``dist.shards=2``, so
   it must equal the 2-process run: the script compares every non-time metric.
4. **eval**: ``gdro-eval`` of each preset's final checkpoint over the seven benchmarks (the real files; GPQA a file
   of our own with its real schema), ``eval.k=8``.
5. **report**: the paper's Table 1 layout from those evaluations, with the paper's rows beside it; ``gdro-report``
   over each sweep (and ``--wandb``: the table into the sweep's W&B group).

vLLM runs in its own venv (``--vllm-python``, default ``.venv-vllm/bin/python``; ``bash scripts/test_vllm.sh`` builds
it): without it, ``--engines`` with vllm stops at once in one line saying so (status 2); ``--engines hf`` needs none.
Everything goes under ``--out`` (default ``outputs/rehearsal/<time>``); ``summary.md`` there holds every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parents[1]
PRESETS = "experiment=paper,paper-prompt-gdro,paper-rollout-gdro"
LABELS = {"paper": "GRPO", "paper-prompt-gdro": "Prompt-GDRO", "paper-rollout-gdro": "Rollout-GDRO"}
BENCH_FILES = {"math500": "math500.jsonl", "aime2024": "aime2024.jsonl", "aime2025": "aime2025.jsonl",
               "amc23": "amc23.jsonl", "minerva": "minerva.jsonl", "olympiadbench": "olympiadbench.jsonl"}
GPQA_FILE = REPO / "tests" / "fixtures" / "benchmarks" / "gpqa_diamond.csv"


# ------------------------------------------------------------------------------------------------ measuring


class PeakMemory:
    """Polls ``/proc`` for every descendant of a process and keeps each one's peak RSS (VmHWM, MiB)."""

    def __init__(self, root: int, every: float = 0.25) -> None:
        self.root, self.every, self.peaks, self._stop = root, every, {}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _children(self, pid: int) -> list[int]:
        out = []
        for task in Path(f"/proc/{pid}/task").glob("*/children"):
            try:
                out += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            stack = [self.root]
            while stack:
                pid = stack.pop()
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("VmHWM:"):
                        mib = int(line.split()[1]) / 1024
                        if mib > self.peaks.get(pid, (0, ""))[0]:
                            self.peaks[pid] = (mib, cmd)
                stack += self._children(pid)
            time.sleep(self.every)

    def python_peaks(self) -> list[float]:
        """Peak MiB of each Python process seen (the trainer / evaluator processes), largest first."""
        return sorted((m for m, cmd in self.peaks.values()
                       if "python" in cmd and "torch.distributed.run" not in cmd and m >= 100), reverse=True)


def run(cmd: list[str], log: Path, env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[float, list[float]]:
    """Run ``cmd`` (output to ``log``); (seconds, peak MiB per Python process). Raises on a non-zero exit."""
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, **(env or {})})
        with PeakMemory(proc.pid) as mem:
            rc = proc.wait(timeout=timeout)
    if rc != 0:
        tail = log.read_text().splitlines()[-15:]
        raise SystemExit(f"rehearsal: {' '.join(cmd[:6])} ... exited {rc}; see {log}\n" + "\n".join(tail))
    return time.perf_counter() - t0, mem.python_peaks()


# ------------------------------------------------------------------------------------------------ phases


def phase_checks(args, out: Path) -> list[str]:
    """The prompt, length, stop-token and decode checks (in this process, on the HF engine)."""
    import torch

    from gdro.common.rollouts import SamplingParams
    from gdro.data.benchmarks import load_benchmark
    from gdro.data.filtering import drop_long_prompts
    from gdro.data.prompts import format_prompt
    from gdro.grading.rewards import MathVerifyReward
    from gdro.models.loading import ModelSpec, load_model, load_tokenizer
    from gdro.rollout.hf import HFGenerator

    spec = ModelSpec(name_or_path="qwen3-rehearsal", dtype="bfloat16", master_dtype="float32", max_prompt_len=3200,
                     max_new_tokens=16)
    tok = load_tokenizer(spec)
    lines = []
    dapo, _ = load_benchmark("dapo_math", data_files=str(args.realdata / "dapo_math_processed_sample.jsonl"))
    math, _ = load_benchmark("math500", data_files=str(args.realdata / "math500.jsonl"))
    for name, p in (("DAPO", dapo[0]), ("MATH-500", math[0])):
        text = format_prompt(tok, p.prompt, True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        lines += [(f"- {name} prompt `{p.uid}`: {len(ids)} tokens, first ids {ids[:3]} (`<|im_start|>`=151644), "
                   f"last ids {ids[-3:]}; the text fed to the model:"), "", "```", text, "```", ""]
    for name, probs in (("DAPO sample", dapo), ("MATH-500", math)):
        for limit in (3200, 256):
            _, dropped = drop_long_prompts(probs, tok, max_prompt_len=limit, use_chat_template=True)
            lines.append(f"- {name}: max_prompt_len={limit} drops {dropped} of {len(probs)} prompts")
    model, tok = load_model(spec, tokenizer=tok)
    reward = MathVerifyReward()
    for stop in ("<|endoftext|>", "<|im_end|>", None):  # a head that always emits `stop` (None: a digit, never stops)
        head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True).to(model.lm_head.weight.dtype)
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
        head.bias.data[tok.convert_tokens_to_ids(stop) if stop else tok.convert_tokens_to_ids("7")] = 50.0
        saved, model.lm_head = model.lm_head, head
        try:
            eng = HFGenerator(model, tok, use_chat_template=True, max_prompt_len=3200, batch_size=8, prune_every=4)
            roll = eng.generate([math[0].prompt], [2], seed=0, sampling=SamplingParams(1.0, 1.0, 0, 8))
        finally:
            model.lm_head = saved
        scored = reward.score(roll.texts, [math[0].answer] * len(roll), roll.finished)
        decoded = [tok.decode(ids, skip_special_tokens=True) for ids in roll.completion_ids]
        lines.append(f"- a model that always emits {stop or 'the digit 7'}: lengths {roll.lengths.tolist()}, finished "
                     f"{roll.finished.tolist()}, texts {roll.texts!r}, decoded == reward's text: {decoded == roll.texts}"
                     f", truncated {scored.n_truncated}")
        ok = (all(roll.finished) and all(roll.lengths == 1)) if stop else (not any(roll.finished))
        if not ok or decoded != roll.texts:
            raise SystemExit(f"rehearsal: stop-token check failed for {stop}: {lines[-1]}")
    return lines


def train_cmd(args, engine: str, procs: int, sweep: Path, presets: str = PRESETS) -> tuple[list[str], dict[str, str]]:
    py = args.vllm_python if engine == "vllm" else sys.executable
    launch = [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)] if procs > 1 else [py]
    subdir = [f"hydra.sweep.subdir={presets.split('=')[1]}"] if "," not in presets else []
    cmd = [*launch, "-m", "gdro.cli.train", "-m", presets, *subdir, f"model={args.model}", f"rollout={engine}", f"model.max_new_tokens={args.new_tokens}",
           f"data.data_files={args.realdata / 'dapo_math_processed_sample.jsonl'}",
           f"data.test_data_files={args.realdata / 'math500.jsonl'}", f"steps={args.steps}",
           f"prompts_per_step={args.prompts}", "rollouts_per_prompt=4", "dist.shards=2", "eval.every=0",
           "eval.at_start=false", "eval.at_end=false", "checkpoint.every=0", "progress=false", f"device={args.device}",
           f"threads={max(1, args.threads // procs)}", f"hydra.sweep.dir={sweep}",
           "logger.wandb_mode=offline"]
    env = {"WANDB_MODE": "offline", "WANDB_DIR": str(sweep), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
           "OMP_NUM_THREADS": str(max(1, args.threads // procs))}
    return cmd, env


def run_dirs(sweep: Path) -> dict[str, Path]:
    """preset -> run dir of one sweep."""
    out = {}
    for run_json in sweep.glob("*/run.json"):
        preset = json.loads(run_json.read_text()).get("choices", {}).get("experiment")
        out[preset] = run_json.parent
    return out


def metric_rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


EXACT = ("difficulty/", "gdro/", "rollout/", "data/", "reward/")  # what the controllers and the engine decide
TRAIN_RTOL = 1e-3  # train/* under bf16 autocast: FSDP's reduction order changes the rounding
TRAIN_ATOL = 1e-6  # (KL and the like sit near 1e-7 after a step: relative differences there mean nothing)


def compare(a: Path, b: Path) -> tuple[int, float]:
    """(values compared, largest relative train/* difference) over the metrics of two runs. As the FSDP test: what
    the controllers and the engine decide (prompts, bins, allocations, rollouts, rewards) equal exactly, the
    losses and other train/* values within TRAIN_RTOL relative; SystemExit otherwise."""
    n, worst = 0, 0.0
    for ra, rb in zip(metric_rows(a), metric_rows(b), strict=True):
        keys = {k for k in ra if not k.startswith("time/") and isinstance(ra[k], (int, float))}
        if keys != {k for k in rb if not k.startswith("time/") and isinstance(rb[k], (int, float))}:
            raise SystemExit(f"rehearsal: {a} and {b} log different metrics")
        for k in keys:
            n += 1
            diff = abs(float(ra[k]) - float(rb[k]))
            if k.startswith("train/"):
                rel = diff / max(abs(float(ra[k])), abs(float(rb[k])), 1e-12)
                worst = max(worst, rel) if diff > TRAIN_ATOL else worst
                bad = diff > TRAIN_RTOL * max(abs(float(ra[k])), abs(float(rb[k]))) + TRAIN_ATOL
            else:
                bad = k.startswith(EXACT) and ra[k] != rb[k]
            if bad:
                raise SystemExit(f"rehearsal: step {ra.get('step')} {k}: {ra[k]} (1 process) != {rb[k]} (2 processes)")
    return n, worst


def tokens_per_s(run: Path) -> float:
    rows = [r for r in metric_rows(run) if "time/gen_s" in r]
    toks = sum(r["rollout/n_total"] * r["rollout/len_mean"] for r in rows)
    return toks / max(sum(r["time/gen_s"] for r in rows), 1e-9)


def eval_cmd(args, checkpoint: Path, out: Path) -> list[str]:
    entries = [f"{{name:{n},data_files:'{args.realdata / f}'}}" for n, f in BENCH_FILES.items()]
    entries.append(f"{{name:gpqa_diamond,data_files:'{GPQA_FILE}'}}")
    return [sys.executable, "-m", "gdro.cli.evaluate", f"model={args.model}", f"checkpoint={checkpoint}",
            f"benchmarks=[{','.join(entries)}]", "eval.k=8", f"eval.max_problems={args.eval_problems}",
            f"out={out}", f"device={args.device}", f"threads={args.threads}", f"hydra.run.dir={out}",
            f"model.max_new_tokens={args.new_tokens}"]


ENGINES = ("hf", "vllm")


def setup_problem(args) -> str | None:
    """What keeps the rehearsal from running as asked, in one line, found before anything runs (None: nothing):
    an unknown engine, or vLLM asked for without its venv (the hf phases would take minutes, then fail)."""
    unknown = [e for e in args.engines.split(",") if e not in ENGINES]
    if unknown:
        return f"--engines {args.engines}: unknown engine {unknown[0]!r} (engines: {', '.join(ENGINES)})"
    if "vllm" not in args.engines.split(","):
        return None
    py = Path(args.vllm_python)
    shown = py.relative_to(REPO) if py.is_absolute() and py.is_relative_to(REPO) else py
    args.vllm_python = str(py.absolute())  # the runs start in the repo (not resolved: a venv's python is a link)
    if not (py.is_file() and os.access(py, os.X_OK)):
        return (f"--engines {args.engines} runs vLLM in its own venv, and {shown} is not there: build it with "
                "`bash scripts/test_vllm.sh` (a few minutes, ~3.5 GB; it runs the vLLM tests too), pass "
                "--vllm-python PYTHON, or rehearse without vLLM: --engines hf")
    found = subprocess.run([str(py), "-c", "import importlib.util, sys; sys.exit(not importlib.util.find_spec('vllm'))"],
                           capture_output=True, check=False)
    if found.returncode != 0:
        return (f"{shown} has no vllm: finish its venv with `bash scripts/test_vllm.sh`, pass --vllm-python PYTHON, "
                "or rehearse without vLLM: --engines hf")
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--realdata", type=Path, default=REPO.parent / "shared" / "realdata")
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "rehearsal" / time.strftime("%Y-%m-%d_%H-%M-%S"))
    ap.add_argument("--engines", default="hf,vllm",
                    help="rollout engines, comma-separated; vllm needs its venv (bash scripts/test_vllm.sh)")
    ap.add_argument("--procs", default="1,2")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step (4 rollouts each)")
    ap.add_argument("--eval-problems", type=int, default=2, help="problems per benchmark in gdro-eval")
    ap.add_argument("--new-tokens", type=int, default=32, help="model.max_new_tokens (the preset's 64 halved: time)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="qwen3-rehearsal")
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--no-eval", action="store_true", help="stop after training (CI's vLLM part)")
    args = ap.parse_args()
    problem = setup_problem(args)
    if problem is not None:
        print(f"rehearsal: {problem}", file=sys.stderr)
        sys.exit(2)
    if not args.realdata.is_dir():
        print(f"rehearsal: skipped, the real data copies are not here ({args.realdata}; --realdata DIR)")
        return
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary = [f"# Rehearsal of the paper's path ({time.strftime('%Y-%m-%d %H:%M')})", ""]
    t_all = time.perf_counter()

    from gdro.models.qwen3 import build_rehearsal_model

    t0 = time.perf_counter()
    build_rehearsal_model()
    summary += [f"## build\n\n{time.perf_counter() - t0:.1f} s\n", "## checks\n"]
    t0 = time.perf_counter()
    summary += phase_checks(args, out)
    summary += [f"\n({time.perf_counter() - t0:.1f} s)\n", "## train\n",
                "| engine | processes | wall s | rollout tokens/s (per preset) | peak MiB per process |",
                "|---|---:|---:|---|---|"]
    sweeps: dict[tuple[str, int], Path] = {}
    for engine in args.engines.split(","):
        for procs in map(int, args.procs.split(",")):
            sweep = out / f"train-{engine}-p{procs}"
            # one Hydra multirun of the three presets, as a researcher runs it; with vLLM in 2 processes its jobs share
            # one torchrun (each job's engine shuts down at the job's end and leaves the run's process group standing)
            cmd, env = train_cmd(args, engine, procs, sweep, PRESETS)
            secs, peaks = run(cmd, out / f"train-{engine}-p{procs}.log", env)
            runs = run_dirs(sweep)
            presets = PRESETS.split("=", 1)[1].split(",")
            if sorted(runs) != sorted(presets):  # a job refused by its config check left the multirun's status 0
                raise SystemExit(f"rehearsal: the {engine} sweep in {procs} process(es) made runs of {sorted(runs)}, "
                                 f"not of {presets}; see {out / f'train-{engine}-p{procs}.log'}")
            tps = ", ".join(f"{LABELS.get(p, p)} {tokens_per_s(r):.0f}" for p, r in sorted(runs.items()))
            summary.append(f"| {engine} | {procs} | {secs:.0f} | {tps} | {', '.join(f'{m:.0f}' for m in peaks)} |")
            sweeps[(engine, procs)] = sweep
            print(summary[-1], flush=True)
    summary += ["", "1-process runs (dist.shards=2) against 2-process runs, every non-time metric:", ""]
    for engine in args.engines.split(","):
        if (engine, 1) in sweeps and (engine, 2) in sweeps:
            one, two = run_dirs(sweeps[(engine, 1)]), run_dirs(sweeps[(engine, 2)])
            for preset in sorted(one):
                n, worst = compare(one[preset], two[preset])
                summary.append(f"- {engine} {LABELS.get(preset, preset)}: {n} values; controller, rollout and reward values "
                               f"equal, train/* within {worst:.2g} relative")
    if args.no_eval:
        (out / "summary.md").write_text("\n".join(summary) + "\n")
        print("\n".join(summary))
        return
    summary += ["", "## eval\n", "| preset | wall s (generated tokens/s) | peak MiB |", "|---|---:|---:|"]
    first = sweeps[next(iter(sweeps))]
    for preset, run_dir in sorted(run_dirs(first).items()):
        dest = run_dir / "eval"  # kept in the run dir: gdro-report lays these out as Table 1
        secs, peaks = run(eval_cmd(args, run_dir / "checkpoint", dest), out / f"eval-{preset}.log")
        tok = json.loads((dest / "eval.json").read_text())["metrics"]
        n = tok["eval/n_problems"] * 8 * sum(m for k, m in tok.items() if k.endswith("/len_mean")) / max(
            sum(1 for k in tok if k.endswith("/len_mean")), 1)
        summary.append(f"| {LABELS.get(preset, preset)} | {secs:.0f} ({n / secs:.0f} tokens/s) | "
                       f"{peaks[0] if peaks else 0:.0f} |")
    secs, _ = run([sys.executable, "-m", "gdro.cli.report", str(first), "--wandb"], out / "report.log",
                  {"WANDB_MODE": "offline"})
    summary += ["", f"## report ({secs:.0f} s: gdro-report {first.name} --wandb; its W&B run joins the sweep's group)\n",
                "### Table 1 (this rehearsal: random weights, a few steps; the paper's rows for reference)\n",
                (first / "report" / "table1.md").read_text()]
    summary.append(f"\nTotal: {time.perf_counter() - t_all:.0f} s")
    (out / "summary.md").write_text("\n".join(summary) + "\n")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
