"""One command for the toy reproduction: every method × seeds on the embedded task, then the table and figures.

    python scripts/reproduce_toy.py [--preset toy|frontier|curriculum] [--seeds ...] [--steps N] [--jobs 2] [--out DIR]

``--preset toy`` (default; 3 seeds, 100 steps, ``outputs/toy-repro``): GRPO (uniform + fixed), Prompt-GDRO,
Rollout-GDRO, Prompt+Rollout-GDRO (joint), the square-root allocator, and the ORACLE control (uniform over the
generator's levels — it reads the label the controllers never see).
``--preset frontier`` (issue #12; 5 seeds, 150 steps, ``outputs/toy-frontier``): ``experiment=toy-frontier`` with
GRPO, the ORACLE control (uniform over levels), Prompt-GDRO, Rollout-GDRO, and Prompt-GDRO with the frontier signal
4p(1 − p), reweighting and resampling (``--methods`` adds ``resample``, ``sqrt``, ``joint``); the variant rows carry
``label=<row>`` so that gdro-report keeps them apart. The protocol (hard tail, threshold, paired comparison) is fixed
in docs/results.md.
``--preset curriculum`` (issue #23; 8 seeds, 250 steps, ``outputs/toy-curriculum``): ``experiment=toy-curriculum``
with GRPO, the ORACLE control, Prompt-GDRO, Rollout-GDRO, the square-root allocator, resampling with the frontier
signal and Prompt-GDRO with eta = 2 (beyond the paper); its protocol is fixed in docs/results.md. Each run is one single-thread ``gdro-train`` process; ``--jobs`` run at a time (2 on a
2-core machine). Then ``gdro-report`` writes ``table.md``, ``table.csv`` and the figures to ``<out>/report/``.

Each run's process is forked from this one after it has imported what every run imports (torch, transformers'
Qwen3, math-verify, datasets, gdro): the run is ``gdro-train``'s own entry point with its own arguments in a fresh
process, its output in ``<out>/<run>.log``, but it does not pay the ~7 s of imports again (a run is ~100 s).
Where ``fork`` is unavailable, each run is a ``python -m gdro.cli.train`` subprocess instead.
Runs that already finished (their metrics.jsonl has the last step) are skipped, so an interrupted
reproduction resumes where it stopped.

The rows are named as the ``method=`` options of conf/method/ (``gdro-train method=rgdro-frozen`` is this script's
``rgdro-frozen`` row on the same preset: tests/test_method_group.py checks each row's config against its method's).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

from gdro.report.presets import TAIL_LEVELS  # each protocol's hard tail (gdro-report's default too)

METHODS: dict[str, list[str]] = {
    "grpo": ["sampler=uniform", "allocator=fixed"],
    "prompt-gdro": ["sampler=prompt-gdro", "allocator=fixed"],
    "rollout-gdro": ["sampler=uniform", "allocator=rollout-gdro"],
    "joint": ["sampler=prompt-gdro", "allocator=rollout-gdro"],
    "sqrt": ["sampler=uniform", "allocator=sqrt"],
    "oracle": ["sampler=oracle-levels", "allocator=fixed"],
}
# --preset frontier (issue #12): experiment=toy-frontier, 150 steps, 5 seeds; the protocol is fixed in docs/results.md
# ("The frontier toy: protocol") before any of its runs. Six rows, the most 5 seeds x 150 steps allow in about
# 80 min on 2 cores: GRPO, the label-reading control (uniform over levels), the paper's Prompt-GDRO and Rollout-GDRO,
# and the two label-free variants aimed at the frontier: Prompt-GDRO with the frontier signal 4p(1-p), reweighting
# and resampling. The other controllers (square-root allocator, joint mode, resample with the failure rate) stay
# config options; --methods adds them (EXTRA). The variant rows carry `label=<row>` so that they are rows of their own
# in gdro-report; the other rows keep their standard names (GRPO stays the baseline).
FRONTIER: dict[str, list[str]] = {
    "grpo": ["sampler=uniform", "allocator=fixed"],
    "oracle": ["sampler=oracle-levels", "allocator=fixed"],
    "prompt-gdro": ["sampler=prompt-gdro", "allocator=fixed"],
    "prompt-gdro-frontier": ["sampler=prompt-gdro", "sampler.signal=frontier", "allocator=fixed"],
    "resample-frontier": ["sampler=prompt-gdro", "sampler.mode=resample", "sampler.signal=frontier",
                          "allocator=fixed"],
    "rollout-gdro": ["sampler=uniform", "allocator=rollout-gdro"],
}
EXTRA: dict[str, list[str]] = {
    "resample": ["sampler=prompt-gdro", "sampler.mode=resample", "allocator=fixed"],
    "sqrt": ["sampler=uniform", "allocator=sqrt"],
    "joint": ["sampler=prompt-gdro", "allocator=rollout-gdro"],
    "zero-variance": ["sampler=uniform", "allocator=zero-variance"],  # issue #48's control; --methods adds it
}
# --preset curriculum (issue #23): experiment=toy-curriculum, 8 seeds. The rows were fixed in docs/results.md
# ("The curriculum toy: protocol") after the pilots (GRPO and the oracle only) and before any other row ran: GRPO, the
# label-reading control, the paper's Prompt-GDRO and Rollout-GDRO, the square-root allocator, and two label-free
# variants argued from mechanism: resampling with the frontier signal (moves the batch, as the oracle does, toward the
# groups that carry gradient) and the paper's Prompt-GDRO with a larger step size (eta 2: weight ratios up to e^2,
# BEYOND THE PAPER's 0.65, whose e^0.65 = 1.9 kept the reweighting mild on the frontier toy).
CURRICULUM: dict[str, list[str]] = {
    **{m: METHODS[m] for m in ("grpo", "oracle", "prompt-gdro", "rollout-gdro", "sqrt")},
    "resample-frontier": FRONTIER["resample-frontier"],
    "prompt-gdro-eta2": ["sampler=prompt-gdro", "sampler.eta=2.0", "allocator=fixed"],
}
# --preset allocation (issue #31): the field's allocation methods at equal compute on experiment=toy-curriculum, 8
# seeds paired with GRPO: GRPO, DAPO dynamic sampling, the GRESO-style pre-rollout skip, Knapsack RL, Rollout-GDRO
# (the paper's default and the variance signal, beyond the paper), the square-root allocator, Prompt-GDRO and the
# label-reading oracle. The report compares them at equal generated tokens (compute.md) as well as at equal steps.
# Regime A of the pilot (docs/results.md): n̄ = 4, so every allocator's arm range is [2, 12], 3 × n̄ (each allocator
# config's own rule, and the paper's value at n̄ = 4; knapsack's official script uses 16 × n̄), settled before any
# allocator row ran.
N_MAX_A = ["allocator.n_max=12"]
ALLOCATION: dict[str, list[str]] = {
    "grpo": METHODS["grpo"],
    "dynamic": ["sampler=uniform", "allocator=fixed", "filter=dynamic"],
    "skip": ["sampler=uniform", "allocator=fixed", "skip=greso"],
    "knapsack": ["sampler=uniform", "allocator=knapsack", *N_MAX_A],
    "rollout-gdro": [*METHODS["rollout-gdro"], *N_MAX_A],
    "rollout-gdro-variance": ["sampler=uniform", "allocator=rollout-gdro-variance", *N_MAX_A],
    "sqrt": [*METHODS["sqrt"], *N_MAX_A],
    "prompt-gdro": METHODS["prompt-gdro"],
    "oracle": METHODS["oracle"],
}
# --preset paper-regime (issue #36): experiment=toy-paper-regime, the paper's any-of-8 bins over a pool that starts
# mostly in accbin_0 (docs/results.md, "The paper regime (issue #36)": protocol, pilot, table). Rows: GRPO, the
# label-reading oracle, Prompt-GDRO and Rollout-GDRO as in #31's table, the Rollout-GDRO dual-dynamics variant the
# pilot chose (VARIANT), the paper preset's Rollout-GDRO, Knapsack RL and the field's two per-prompt samplers (learnability = LILO, MoPPS). The same
# rows run in #31's regime with --preset allocation-36 (the rows #31 measured with unchanged code are reused there).
# Pilot rows (--preset paper-regime-variants, seeds 100-101, never in the table): the dual-dynamics options of
# Rollout-GDRO (issue #36 item 4).
VARIANTS: dict[str, list[str]] = {
    "rgdro-rest": ["sampler=uniform", "allocator=rollout-gdro", *N_MAX_A, "allocator.mu_target=rest"],
    "rgdro-per-prompt": ["sampler=uniform", "allocator=rollout-gdro", *N_MAX_A, "allocator.joint=per_prompt"],
    "rgdro-rest-per-prompt": ["sampler=uniform", "allocator=rollout-gdro", *N_MAX_A, "allocator.mu_target=rest",
                              "allocator.joint=per_prompt"],
    "rgdro-frozen": ["sampler=uniform", "allocator=rollout-gdro", *N_MAX_A, "allocator.consumption=realized"],
    "rgdro-symmetric": ["sampler=uniform", "allocator=rollout-gdro", "allocator.n_max=6"],
    # added by the protocol's amendment (docs/results.md), before its runs
    "rgdro-variance-rest": ["sampler=uniform", "allocator=rollout-gdro-variance", *N_MAX_A, "allocator.mu_target=rest"],
    # the paper preset's arm scores (official update on pg_loss, experiment=paper-rollout-gdro's allocator)
    "rgdro-paper-preset": ["sampler=uniform", "allocator=rollout-gdro", *N_MAX_A, "allocator.score_update=official",
                           "allocator.signal=pg_loss"],
}
VARIANT = "rgdro-frozen"  # the pilot's choice (docs/results.md), set before its table rows ran
PAPER_REGIME: dict[str, list[str]] = {
    **{m: ALLOCATION[m] for m in ("grpo", "oracle", "prompt-gdro", "rollout-gdro")},
    VARIANT: VARIANTS[VARIANT],
    "rgdro-paper-preset": VARIANTS["rgdro-paper-preset"],  # added by the protocol's second amendment
    "knapsack": ALLOCATION["knapsack"],
    "learnability": ["sampler=learnability", "allocator=fixed"],
    "mopps": ["sampler=mopps", "allocator=fixed"],
}
# --preset moving-frontier (issue #48 item 4): experiment=toy-moving-frontier, the rows its protocol in docs/results.md
# ("A moving frontier (issue #48)": "The table's protocol") fixes before any row runs; arms [2, 12] (3 × n̄) for every
# allocator row. LEARNABILITY_WINDOW is set by the learnability pilot (--preset moving-frontier-learnability, seeds
# 100-101, never table seeds) before the table's rows run.
LEARNABILITY_PILOT: dict[str, list[str]] = {
    f"learnability-w{w}": ["sampler=learnability", f"sampler.window={w}", "allocator=fixed"] for w in (2, 4)}
LEARNABILITY_WINDOW: int | None = 2  # the pilot's choice (docs/results.md: the larger mean area vs GRPO of windows 2, 4)
MOVING_FRONTIER: dict[str, list[str]] = {
    "grpo": ALLOCATION["grpo"],
    "zero-variance": ["sampler=uniform", "allocator=zero-variance", *N_MAX_A],
    "skip": ALLOCATION["skip"],
    "knapsack": ALLOCATION["knapsack"],
    "rollout-gdro": ALLOCATION["rollout-gdro"],
    "rgdro-frozen": VARIANTS["rgdro-frozen"],
    "rgdro-paper-preset": VARIANTS["rgdro-paper-preset"],
    "prompt-gdro": ALLOCATION["prompt-gdro"],
    **({f"learnability-w{LEARNABILITY_WINDOW}": LEARNABILITY_PILOT[f"learnability-w{LEARNABILITY_WINDOW}"]}
       if LEARNABILITY_WINDOW else {}),
    "mopps": PAPER_REGIME["mopps"],
    "mopps-decay": ["sampler=mopps", "sampler.decay=0.5", "sampler.candidate_ratio=8", "allocator=fixed"],
}
# --preset smollm2-frontier (issue #48 item 5): GRPO, the zero-variance control and the toy table's two best label-free
# rows (mu-frozen Rollout-GDRO +10.6, Prompt-GDRO +6.3), without the toy's arm cap of 12: n_max stays the allocator
# configs' default, 3 x n̄ = 24 at n̄ = 8
SMOLLM2_FRONTIER: dict[str, list[str]] = {
    "grpo": ALLOCATION["grpo"],
    "zero-variance": ["sampler=uniform", "allocator=zero-variance"],
    "rgdro-frozen": ["sampler=uniform", "allocator=rollout-gdro", "allocator.consumption=realized"],
    "prompt-gdro": ALLOCATION["prompt-gdro"],
}
PRESETS: dict[str, dict] = {
    "toy": {"methods": METHODS, "base": [], "steps": 100, "seeds": [0, 1, 2], "out": "outputs/toy-repro"},
    "frontier": {"methods": FRONTIER, "extra": EXTRA, "base": ["experiment=toy-frontier"], "steps": 150,
                 "seeds": [0, 1, 2, 3, 4], "out": "outputs/toy-frontier",
                 # the hard tail of the protocol (docs/results.md): the levels below 50% mean@8 at the warm start
                 "report": ["--tail-levels", TAIL_LEVELS["toy-frontier"]]},
    "curriculum": {"methods": CURRICULUM, "extra": EXTRA, "base": ["experiment=toy-curriculum"], "steps": 250,
                   "seeds": [0, 1, 2, 3, 4, 5, 6, 7], "out": "outputs/toy-curriculum",
                   # the hard tail of the protocol (docs/results.md): the levels below 50% mean@8 at the warm start
                   "report": ["--tail-levels", TAIL_LEVELS["toy-curriculum"]]},
    "allocation": {"methods": ALLOCATION, "base": ["experiment=toy-curriculum", "rollouts_per_prompt=4"], "steps": 250,
                   "seeds": [0, 1, 2, 3, 4, 5, 6, 7], "out": "outputs/allocation",
                   "report": ["--tail-levels", TAIL_LEVELS["toy-curriculum"], "--axis", "tokens"]},
    "paper-regime": {"methods": PAPER_REGIME, "extra": VARIANTS, "base": ["experiment=toy-paper-regime"], "steps": 150,
                     "seeds": [0, 1, 2, 3, 4, 5, 6, 7], "out": "outputs/paper-regime",
                     "report": ["--tail-levels", TAIL_LEVELS["toy-paper-regime"], "--axis", "tokens"]},
    "paper-regime-variants": {"methods": {"grpo": ALLOCATION["grpo"], **VARIANTS},
                              "base": ["experiment=toy-paper-regime"], "steps": 150, "seeds": [100, 101],
                              "out": "outputs/paper-regime-pilot",
                              "report": ["--tail-levels", TAIL_LEVELS["toy-paper-regime"], "--axis", "tokens"]},
    # issue #48's pilot (docs/results.md, "A moving frontier (issue #48)"): GRPO only, seeds 100-101, candidate A as
    # committed; candidates B and C are overrides after --
    "moving-frontier-pilot": {"methods": {"grpo": ALLOCATION["grpo"]}, "base": ["experiment=toy-moving-frontier"],
                              "steps": 300, "seeds": [100, 101], "out": "outputs/moving-frontier-pilot/A",
                              "report": ["--tail-levels", "9", "--axis", "tokens"]},
    "moving-frontier-learnability": {"methods": LEARNABILITY_PILOT, "base": ["experiment=toy-moving-frontier"],
                                     "steps": 300, "seeds": [100, 101], "out": "outputs/moving-frontier-pilot/A",
                                     "report": ["--tail-levels", TAIL_LEVELS["toy-moving-frontier"], "--axis",
                                                "tokens"]},
    "moving-frontier": {"methods": MOVING_FRONTIER, "base": ["experiment=toy-moving-frontier"], "steps": 300,
                        "seeds": list(range(10)), "out": "outputs/moving-frontier",
                        "report": ["--tail-levels", TAIL_LEVELS["toy-moving-frontier"], "--axis", "tokens",
                                   "--primary", "area"]},
    # issue #48 item 5's pilot (protocol in docs/results.md, "On the real model: the protocol", committed before it
    # ran): GRPO on SmolLM2-135M-Instruct (experiment=smollm2-frontier, candidate A; B and C are overrides after --),
    # read by experiments/moving_frontier_pilot.py --hard 4
    "smollm2-frontier-pilot": {"methods": {"grpo": ALLOCATION["grpo"]}, "base": ["experiment=smollm2-frontier"],
                               "steps": 60, "seeds": [100, 101], "out": "outputs/smollm2-frontier-pilot/A",
                               "report": ["--tail-levels", "4", "--axis", "tokens"]},
    # issue #48 item 5's table (docs/results.md, "On the real model: the protocol"): candidate A passed the pilot; the
    # rows its rule fixes (the toy table's two label-free rows with the largest mean Δ area against GRPO), written here
    # before any of its runs; every allocator row with arms [2, 24] (3 x n̄, n̄ = 8: the allocators' own default)
    "smollm2-frontier": {"methods": SMOLLM2_FRONTIER, "base": ["experiment=smollm2-frontier"], "steps": 60,
                         "seeds": [0, 1, 2, 3, 4], "out": "outputs/smollm2-frontier",
                         "report": ["--tail-levels", TAIL_LEVELS["smollm2-frontier"], "--axis", "tokens",
                                    "--primary", "area"]},
    # #31's regime (experiment=toy-curriculum, n̄ = 4): GRPO rerun (its finals must equal #31's digit for digit), and
    # the rows #31 did not have; #31's other rows are reused (unchanged code)
    "allocation-36": {"methods": {m: PAPER_REGIME[m] for m in ("grpo", VARIANT, "learnability", "mopps")},
                      "base": ["experiment=toy-curriculum", "rollouts_per_prompt=4"], "steps": 250,
                      "seeds": [0, 1, 2, 3, 4, 5, 6, 7], "out": "outputs/allocation-36",
                      "report": ["--tail-levels", TAIL_LEVELS["toy-curriculum"], "--axis", "tokens"]},
}


# relative run time of each row, measured here (reproduction of issue #11: oracle 123 s, square-root 95 s, the
# others 87-100 s); only the order in which runs start depends on it
COST = {"dynamic": 2.0, "oracle": 1.3, "resample-frontier": 1.25, "sqrt": 1.05, "grpo": 1.0, "prompt-gdro": 1.0,
        "prompt-gdro-eta2": 1.0, "joint": 0.95, "rollout-gdro": 0.95}


FORK = "fork" in mp.get_all_start_methods()  # runs forked from this process, else subprocesses


def finished(run_dir: Path, steps: int) -> bool:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return False
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return any(r.get("step") == steps and any(k.startswith("eval/") for k in r) for r in rows)


def _argv(overrides: list[str], seed: int, steps: int, run_dir: Path, extra: list[str]) -> list[str]:
    return [*overrides, f"seed={seed}", f"steps={steps}", "threads=1", "logger=jsonl", "progress=false",
            "save_final=false", f"hydra.run.dir={run_dir}", *extra]


def _preload() -> None:
    """Import, once, what every run imports; runs forked from this process then start without it."""

    # isort: split
    import datasets  # noqa: F401
    import math_verify  # noqa: F401
    import torch  # noqa: F401  (no torch op runs here: the forked runs start their own thread pools)
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
    from transformers.models.qwen3 import modeling_qwen3  # noqa: F401

    import gdro.algorithm.trainer
    import gdro.cli.train
    import gdro.compose.build  # noqa: F401


def _forked_run(argv: list[str], log_path: str) -> None:
    """In the forked child: stdout and stderr to the run's log, then ``gdro-train`` with ``argv``."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["gdro-train", *argv]
    from gdro.cli.train import train

    train()


class Run:
    """One run in its own process: forked from this one (``fork``), else a ``python -m gdro.cli.train`` subprocess."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name, self.t_start = name, time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()
        if FORK:
            self.proc = mp.get_context("fork").Process(target=_forked_run, args=(argv, str(log)))
            self.proc.start()
        else:
            with log.open("w") as fh:
                self.proc = subprocess.Popen([sys.executable, "-m", "gdro.cli.train", *argv], stdout=fh,
                                             stderr=subprocess.STDOUT)

    def exit_code(self) -> int | None:
        """None while running; else the exit status (128 + N for a run killed by signal N)."""
        if isinstance(self.proc, subprocess.Popen):
            rc = self.proc.poll()
        else:
            rc = None if self.proc.is_alive() else self.proc.exitcode
        return rc if rc is None or rc >= 0 else 128 - rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=list(PRESETS), default="toy",
                    help="toy: the default task's six rows (3 seeds, 100 steps); frontier: experiment=toy-frontier "
                         "and its label-free controllers (5 seeds, 150 steps)")
    ap.add_argument("--seeds", nargs="+", type=int, default=None)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--methods", nargs="+", default=None, help="rows of the preset (default: all)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("overrides", nargs="*", help="extra gdro-train overrides for every run, after --")
    args = ap.parse_args()
    preset = PRESETS[args.preset]
    methods: dict[str, list[str]] = {**preset["methods"], **preset.get("extra", {})}
    args.seeds = preset["seeds"] if args.seeds is None else args.seeds
    args.steps = preset["steps"] if args.steps is None else args.steps
    args.out = Path(preset["out"]) if args.out is None else args.out
    args.methods = list(preset["methods"]) if args.methods is None else args.methods
    unknown = [m for m in args.methods if m not in methods]
    if unknown:
        ap.error(f"--methods: {unknown} not rows of --preset {args.preset} (rows: {', '.join(methods)})")
    # a row that is more than a sampler+allocator choice (a variant: sampler.signal=..., sampler.mode=...) carries
    # label=<row> so that gdro-report keeps it apart; the plain rows keep their standard names (GRPO is the baseline)
    rows = {m: [*preset["base"], *methods[m],
                *([f"label={m}"] if any(not o.startswith(("sampler=", "allocator=")) for o in methods[m]) else [])]
            for m in args.methods}
    args.out.mkdir(parents=True, exist_ok=True)
    # longest runs first (the oracle samples the long strings; the square-root allocator gives their bins more
    # rollouts), so that the two workers finish together instead of one waiting on the last long run
    order = sorted(args.methods, key=lambda m: -COST.get(m, 1.0))
    jobs = [(m, rows[m], s) for m in order for s in args.seeds]
    t0 = time.perf_counter()
    print(f"{len(jobs)} runs ({len(args.methods)} methods x {len(args.seeds)} seeds, {args.steps} steps), "
          f"{args.jobs} at a time -> {args.out}", flush=True)
    if FORK:
        _preload()
    failed: list[str] = []
    pending = list(jobs)
    running: list[Run] = []
    while pending or running:
        while pending and len(running) < args.jobs:
            m, overrides, seed = pending.pop(0)
            run_dir = args.out / f"{m}_s{seed}"
            if finished(run_dir, args.steps):
                print(f"  {m}_s{seed:<15} finished before", flush=True)
                continue
            running.append(Run(f"{m}_s{seed}", _argv(overrides, seed, args.steps, run_dir, args.overrides),
                               args.out / f"{m}_s{seed}.log"))
        time.sleep(0.2)
        for run in [r for r in running if r.exit_code() is not None]:
            running.remove(run)
            rc = run.exit_code()
            status = "ok" if rc == 0 else f"FAILED (rc={rc}, see {args.out / (run.name + '.log')})"
            print(f"  {run.name:18s} {status}  {time.perf_counter() - run.t_start:6.0f} s   "
                  f"(elapsed {time.perf_counter() - t0:6.0f} s)", flush=True)
            if rc:
                failed.append(run.name)
    from gdro.cli.report import main as report_main

    rc = report_main([str(args.out), *preset.get("report", [])])
    print(f"total elapsed {time.perf_counter() - t0:.0f} s; report in {args.out / 'report'}")
    sys.exit(1 if failed or rc else 0)


if __name__ == "__main__":
    main()
