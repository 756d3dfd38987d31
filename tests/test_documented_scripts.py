"""The scripts the README and docs name, each run in a short form, so that a change that breaks one fails CI
(issue #52 item 4). Each test runs the real script in a child process at a tiny size (one size, one step, one seed)
and checks what it prints; the scripts that need SmolLM2 or the real data copies skip with the reason where those are
absent, and the GPU scripts run their CPU form (scripts/gpu_check.py --cpu; scripts/gpu_session.sh with DEVICE=cpu):
their CUDA-only lines (peak CUDA memory, the vLLM engine, nvidia-smi) are not covered here."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

REALDATA = Path(os.environ.get("GDRO_REALDATA", REPO.parent / "shared" / "realdata"))
M = re.MULTILINE
# gdro-train overrides that make a toy run small: 4 prompts from a pool of 16, one held-out problem per level
SMALL_TOY = ["prompts_per_step=4", "data.train_size=16", "data.test_per_level=1"]


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``cmd`` in the repo root; it must exit 0 (else its output's tails are the failure)."""
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (f"{' '.join(map(str, cmd))} exited {proc.returncode}\n--- stdout\n"
                                  f"{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}")
    return proc


def _script(name: str, *args: object, **kwargs) -> subprocess.CompletedProcess:
    return _run([sys.executable, str(REPO / "scripts" / name), *map(str, args)], **kwargs)


def _floats(pattern: str, text: str) -> list[tuple[float, ...]]:
    """Every match of ``pattern`` in ``text``, its groups as floats (``,`` thousands separators dropped)."""
    return [tuple(float(g.replace(",", "")) for g in m.groups()) for m in re.finditer(pattern, text, M)]


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """The SmolLM2-135M-Instruct dir (built by scripts/get_smollm2.py, as tests/test_real_model.py finds it)."""
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "get_smollm2.py")], cwd=REPO, capture_output=True,
                         text=True, timeout=1200, check=False)
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or ["no reason given"])[-1]
        pytest.skip(f"SmolLM2-135M-Instruct could not be built: {reason}")
    return Path(out.stdout.strip().splitlines()[-1])


def test_bench_vs_trl_runs_in_short_form():
    """The README's "Performance" comparison with TRL: one round of a tiny step against TRL's own GRPOTrainer. It
    stopped at an interpolation error once (its reward node read alone could not resolve ${model.max_new_tokens})."""
    pytest.importorskip("trl")
    proc = subprocess.run([sys.executable, "scripts/bench_vs_trl.py", "--sizes", "tiny", "--repeats", "1",
                           "--prompts", "4", "--per-prompt", "2", "--new-tokens", "4", "--threads", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("ours/trl tiny=") and "tiny=n/a" not in last, proc.stdout[-2000:]


def test_memory_table_prints_the_tables_docs_scaling_shows():
    """scripts/memory_table.py (docs/scaling.md) is arithmetic only, so it runs whole: its three tables, every model at
    1-8 GPUs, and every row it prints is the row docs/scaling.md shows (the doc is this script's output)."""
    out = _script("memory_table.py").stdout
    for heading in ("### Models and settings", "### Trainer per GPU (GB)", "### Totals per GPU (GB)"):
        assert heading in out, out[:2000]
    rows = [line for line in out.splitlines() if line.startswith("| qwen3-")]
    assert len(rows) == 3 + 12 + 12, rows
    assert _floats(r"^\| qwen3-1\.7b \| ([\d.]+) B \|", out) == [(1.721,)]
    doc = set((REPO / "docs" / "scaling.md").read_text().splitlines())
    stale = [row for row in rows if row not in doc]
    assert not stale, f"docs/scaling.md lacks these rows of scripts/memory_table.py's output (rerun it): {stale}"


def test_bench_controllers_runs_in_short_form():
    """scripts/bench_controllers.py at 16 prompts from a pool of 200, 8 steps (its first 5 are not timed): every
    configuration x estimator prints a median and a p90."""
    out = _script("bench_controllers.py", "--prompts", 16, "--pool", 200, "--steps", 8).stdout
    assert out.startswith("16 prompts/step, n̄ = 4, pool 200"), out[:500]
    rows = re.findall(r"^  (.+?)\s+(any_correct|unbiased_passk)\s+median\s+([\d.]+) ms\s+p90\s+([\d.]+) ms$", out, M)
    assert len(rows) == 12 and len({r[:2] for r in rows}) == 12, out
    assert {r[0] for r in rows} >= {"uniform (classifier only)", "rollout-gdro (n_max 12)",
                                    "joint: prompt- + rollout-gdro"}, out
    for *_, med, p90 in rows:
        assert 0 < float(med) <= float(p90) < 1e4, out


def test_bench_memory_runs_in_short_form():
    """scripts/bench_memory.py (README, docs/gpu.md) at the real vocabulary with a 16-wide, 1-layer model: 4 rollouts
    of 8 tokens, each phase's time and peak RSS, and an update that changes the parameters."""
    out = _script("bench_memory.py", "--rollouts", 4, "--per-prompt", 2, "--new-tokens", 8, "--hidden", 16,
                  "--layers", 1, "--threads", 1).stdout
    assert "model: Qwen3, vocab 151,936, hidden 16, 1 layers" in out, out
    phases = _floats(r"^(?:generate 4 x 8 \(HF engine\)|reference log-probs \(no grad\)|update \(reference pass \+ "
                     r"fwd/bwd\))\s+([\d.]+) s\s+([\d.]+) tok/s\s+peak RSS\s+([\d.]+) GiB$", out)
    assert len(phases) == 3 and all(rss > 0 for *_, rss in phases), out
    (changed,) = _floats(r"parameters changed by the step: ([\d.]+)% of", out)[0]
    assert changed > 0, out
    assert _floats(r"^peak RSS of the step: ([\d.]+) GiB$", out)[0][0] > 0, out


def test_gpu_check_runs_on_the_cpu_in_short_form():
    """scripts/gpu_check.py --cpu: the script's whole HF-engine path (model build, one GRPO step through
    bench_memory's grpo_step, the summary line) on the CPU at hidden 64, 1 layer. Not covered: CUDA itself (device
    name, memory counters, peak CUDA memory), the Qwen3-1.7B size and --engine vllm (no GPU in CI)."""
    out = _script("gpu_check.py", "--cpu", "--layers", 1, "--rollouts", 4, "--per-prompt", 2, "--new-tokens", 8).stdout
    assert out.startswith("CPU (--cpu: a check of the script, not a measurement); Qwen3-shaped, hidden 64, 1 layers"), \
        out
    assert _floats(r"parameters changed by the step: ([\d.]+)% of", out)[0][0] > 0, out
    last = _floats(r"^rollout (\d+) tok/s; reference (\d+) tok/s; training \(incl\. its reference pass\) (\d+) tok/s; "
                   r"peak RSS ([\d.]+) GiB$", out)
    assert len(last) == 1 and last[0][3] > 0, out


def test_gpu_session_runs_on_the_cpu_in_short_form(tmp_path):
    """scripts/gpu_session.sh (docs/gpu.md) with DEVICE=cpu: its environment lines, gpu_check.py --cpu (the step at
    hidden 64) and its exit line, then the rehearsal's command line with the session's flags (--device, --model,
    --procs, --threads, --realdata, --out and REHEARSAL_ARGS) parsed and set up by scripts/rehearse_paper.py, which
    stops there, no real data copies being named. Not covered: nvidia-smi, CUDA, the .whl install (no .whl/ here)
    and the rehearsal's phases themselves: those are CI's own rehearse_paper.py call (.ci/run), on the CPU."""
    if (REPO / ".whl").exists():
        pytest.skip(".whl/ is here: gpu_session.sh would pip-install it into /tmp/site")
    out = tmp_path / "gpu"
    venv_bin = str(Path(sys.executable).parent)  # the script calls python3: this venv's
    _run(["bash", str(REPO / "scripts" / "gpu_session.sh")], timeout=900, env={
        "PATH": f"{venv_bin}:{os.environ['PATH']}", "OUT": str(out), "REH": str(tmp_path / "rehearsal"),
        "DEVICE": "cpu", "MODEL": "qwen3-rehearsal", "REALDATA": str(tmp_path / "no-realdata"),
        "GPU_CHECK_ARGS": "--cpu --layers 1 --rollouts 4 --per-prompt 2 --new-tokens 8",
        "REHEARSAL_ARGS": "--steps 1 --prompts 2 --new-tokens 8 --threads 1 --no-eval"})
    env_txt = (out / "env.txt").read_text()
    assert re.search(r"^torch \S+ transformers \S+ peft \S+ no CUDA$", env_txt, M), env_txt
    check = (out / "gpu_check.log").read_text()
    assert re.search(r"^gpu_check: exit 0, \d+ s$", check, M), check[-3000:]
    assert re.search(r"^rollout \d+ tok/s; .* peak RSS [\d.]+ GiB$", check, M), check[-3000:]
    rehearsal = (out / "rehearsal.log").read_text()
    assert re.search(r"^rehearsal: exit 0, \d+ s$", rehearsal, M), rehearsal[-3000:]
    assert "rehearsal: skipped, the real data copies are not here" in rehearsal, rehearsal[-3000:]


def test_build_tiny_model_runs_in_short_form(tmp_path):
    """scripts/build_tiny_model.py (README, docs/toy-task.md) with 2 SFT steps into a tmp dir: a checkpoint that
    loads, with the parameter count and settings its gdro_build.json records."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "tiny"
    _script("build_tiny_model.py", "--out", out, "--sft-steps", 2, "--no-progress", "--threads", 1, "--seed", 3)
    build = json.loads((out / "gdro_build.json").read_text())
    assert build["args"]["sft_steps"] == 2 and build["args"]["seed"] == 3 and build["torch_num_threads"] == 1, build
    assert math.isfinite(build["final_loss_ema"]) and build["final_loss_ema"] > 0, build
    model = AutoModelForCausalLM.from_pretrained(out)
    assert sum(p.numel() for p in model.parameters()) == build["num_params"] > 0
    assert AutoTokenizer.from_pretrained(out)("12")["input_ids"]


def test_eval_noise_runs_in_short_form(tmp_path):
    """scripts/eval_noise.py (README, docs/toy-task.md): the shipped tiny model, 2 sampling seeds, one held-out
    problem per level; a line per seed, the spread over seeds, and the --json figures."""
    report = tmp_path / "noise.json"
    out = _script("eval_noise.py", "--checkpoints", "tiny", "--seeds", 0, 1, "--threads", 1, "--json", report, "--",
                  "data.test_per_level=1", "device=cpu").stdout
    per_seed = _floats(r"^tiny  seed=(\d)  mean@8=([\d.]+)  pass@8=([\d.]+)$", out)
    assert [s for s, *_ in per_seed] == [0, 1] and all(0 <= m <= p <= 100 for _, m, p in per_seed), out
    spread = _floats(r"^tiny  eval/(?:mean|pass)@8: ([\d.]+) ± ([\d.]+) \(std over 2 seeds\)$", out)
    assert len(spread) == 2, out
    figures = json.loads(report.read_text())["tiny"]
    assert figures["n_problems"] == 8 and len(figures["per_seed"]) == 2, figures
    assert figures["summary"]["eval/mean@8"]["mean"] == pytest.approx(spread[0][0], abs=0.01)


def test_bench_shared_prefix_runs_in_short_form():
    """scripts/bench_shared_prefix.py (docs/performance.md) at 2 prompts x 2 rollouts, one repeat: the tokens each
    layout feeds, the layouts' log-probs agreeing with one row per sequence, and every timing."""
    out = _script("bench_shared_prefix.py", "--prompts", 2, "--n", 2, "--repeats", 1, "--threads", 1).stdout
    assert out.startswith("4 rows; real tokens"), out
    fed = _floats(r"^tokens fed per pass: rows (\d+) \(\d+% real\), kv (\d+) \(\d+% real\), "
                  r"packed (\d+) \(100% real\)$", out)
    assert len(fed) == 1 and fed[0][0] >= fed[0][1] >= fed[0][2] > 0, out
    diffs = _floats(r"^max \|log-prob diff\| (?:kv|packed) vs rows: (\S+)$", out)
    assert len(diffs) == 2 and all(d < 1e-4 for (d,) in diffs), out
    assert len(_floats(r"^\s+(?:ref|update|generate) .+: ([\d.]+)   \[", out)) == 8, out


def test_bench_portable_runs_in_short_form():
    """scripts/bench_portable.py (README, docs/results.md): one round of 2-step runs in its three settings, and the
    summary. It evaluated every run twice (eval.every=0 left the step-0 and final evaluations on) until #52."""
    out = _script("bench_portable.py", "--rounds", 1, "--steps", 2, "--", *SMALL_TOY).stdout
    rounds = re.findall(r"^round 1: (.+): [\d.]+ s/step$", out, M)
    assert rounds == ["default, 1 thread", "GDRO_PORTABLE=1", "default, torch's threads"], out
    ratios = _floats(r"^  .{26} [\d.]+  \(x([\d.]+) of the 1-thread default; runs", out)
    assert len(ratios) == 3 and ratios[0] == (1.0,), out


@pytest.fixture(scope="module")
def allocation_sweep(tmp_path_factory) -> tuple[Path, str]:
    """scripts/allocation_compare.sh in its short form: its nine rows, seed 0, 2 steps of a small toy run."""
    out = tmp_path_factory.mktemp("allocation")
    proc = _run(["bash", str(REPO / "scripts" / "allocation_compare.sh"), "--seeds", "0", "--steps", "2", "--out",
                 str(out), "--", *SMALL_TOY], env={"PYTHON": sys.executable}, timeout=900)
    return out, proc.stdout


def test_allocation_compare_runs_in_short_form(allocation_sweep):
    """scripts/allocation_compare.sh (README, docs/allocation.md, docs/results.md) runs its nine allocation rows and
    gdro-report at equal tokens: every run ok, the table with every row, the compute and paired reports."""
    out, stdout = allocation_sweep
    assert stdout.startswith("9 runs (9 methods x 1 seeds, 2 steps), 2 at a time"), stdout[:500]
    assert len(re.findall(r"^  \S+_s0 +ok ", stdout, M)) == 9 and "FAILED" not in stdout, stdout[:3000]
    table = (out / "report" / "table.md").read_text()
    for row in ("GRPO", "Prompt-GDRO", "Rollout-GDRO", "Square-root", "Knapsack RL", "Dynamic sampling (DAPO)"):
        assert f"\n| {row} | 1 | " in table, table[:3000]
    assert "Axis: **generated tokens" in (out / "report" / "compute.md").read_text()
    assert (out / "report" / "paired.md").is_file()


def test_summarize_gdro_runs_on_the_short_sweep(allocation_sweep):
    """scripts/summarize_gdro.py (README, docs/prompt-gdro.md, docs/rollout-gdro.md) on two runs of the short
    allocation sweep: Prompt-GDRO's per-bin weights and shares, Rollout-GDRO's rollouts per bin, both eval curves."""
    out, _ = allocation_sweep
    stdout = _script("summarize_gdro.py", out / "prompt-gdro_s0", out / "rollout-gdro_s0").stdout
    blocks = stdout.split("\n== ")[1:]
    assert len(blocks) == 2 and all("(2 steps; early = first 1, late = last" in b for b in blocks), stdout
    pgdro, rgdro = blocks
    assert pgdro.splitlines()[1].split()[-1] == "unseen", pgdro  # the bins' header: 0 ... 9 unseen
    for when in ("early", "late"):  # the adversary's weights: a distribution over the bins
        weights = re.search(rf"^weigh {when}((?:\s+[\d.]+)+)$", pgdro, M)
        assert weights and sum(map(float, weights.group(1).split())) == pytest.approx(1, abs=0.01), pgdro
    assert re.search(r"^rollo late\s+[\d.]", rgdro, M) and "gdro/mu: early" in rgdro, rgdro
    for block in blocks:
        evals = _floats(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)   ", block)
        assert [e[0] for e in evals] == [0, 2] and all(0 <= m <= p <= 100 for _, m, p in evals), block


def test_paper_regime_compare_runs_in_short_form(tmp_path):
    """scripts/paper_regime_compare.sh (README, docs/results.md): both tables' rows (the paper regime's nine, #31's
    regime's four), seed 0, one small step each, then gdro-report and the paper's mechanism figures for each sweep."""
    proc = _run(["bash", str(REPO / "scripts" / "paper_regime_compare.sh"), "--seeds", "0", "--steps", "1", "--",
                 *SMALL_TOY], env={"PYTHON": sys.executable, "OUT_ROOT": str(tmp_path)}, timeout=900)
    heads = re.findall(r"^(\d+) runs \((\d+) methods x 1 seeds, 1 steps\)", proc.stdout, M)
    assert heads == [("9", "9"), ("4", "4")], proc.stdout[:3000]
    assert len(re.findall(r"^  \S+_s0 +ok ", proc.stdout, M)) == 13 and "FAILED" not in proc.stdout, proc.stdout
    for sweep, rows in (("paper-regime", 9), ("allocation-36", 4)):
        table = (tmp_path / sweep / "report" / "table.md").read_text()
        assert len(re.findall(r"^\| .+ \| 1 \| ", table, M)) == rows, table[:3000]
        assert (tmp_path / sweep / "report" / "paper_mechanism.md").is_file()


def test_smollm2_summary_runs_on_a_short_sweep(tmp_path):
    """scripts/smollm2_summary.py (docs/real-model.md, docs/results.md) on a 2-run multirun of experiment=smollm2-add
    (GRPO and Rollout-GDRO, seed 0) with the tiny model in SmolLM2's place, 1 step: the same files and keys as the
    real runs (eval/mean@1, eval/boxed, eval/finished per level); the table, the gains and the paired difference."""
    sweep = tmp_path / "sweep"
    _run([sys.executable, "-m", "gdro.cli.train", "-m", "experiment=smollm2-add", "model=tiny",
          "allocator=fixed,rollout-gdro", "steps=1", "prompts_per_step=2", "rollouts_per_prompt=2",
          "data.train_size=8", "data.test_per_level=1", "eval.every=0", "checkpoint.every=0", "checkpoint.at_end=false",
          "save_final=false", "logger=jsonl", "progress=false", f"hydra.sweep.dir={sweep}"], timeout=600)
    out = _script("smollm2_summary.py", sweep).stdout
    rows = re.findall(r"^\| (GRPO|Rollout-GDRO) \| 1 \| (step 0 \(0\)|last \(1\)|\*\*gain\*\*) \| (.+) \|$", out, M)
    assert len(rows) == 6, out
    levels = re.findall(r"acc L(\d+)", out.splitlines()[0])
    assert levels == ["1", "2", "3"] and all(len(r[2].split(" | ")) == 3 * (1 + len(levels)) for r in rows), out
    assert re.search(r"^\| Rollout-GDRO \| 1 \| [-+\d.]+ \(n=1\) \|", out, M), out  # paired with GRPO


def test_realdata_check_runs_in_short_form():
    """scripts/realdata_check.py (docs/scoring.md) on the real copies, the first 8 problems of each file: every file
    loads, every gold matches itself on both paths, and the verdict digest is printed."""
    if not REALDATA.is_dir():
        pytest.skip(f"real benchmark copies not found ({REALDATA.name}/ beside the project; GDRO_REALDATA)")
    out = _script("realdata_check.py", "--data", REALDATA, "--limit", 8).stdout
    rows = re.findall(r"^\| (\S+\.jsonl) \| (\d+) \| (\d+) \| \d+ \| \d+ \| \d+ \| (\d+)/(\d+) \| (\d+)/(\d+) "
                      r"\| (\d+)/(\d+) \| (\d+) / (\d+) \| [\d.]+ \|$", out, M)
    assert len(rows) == 9, out
    for file, _, kept, mv, n_mv, default, n_default, rejected, n_perturbed, ev, _train in rows:
        assert int(n_mv) == int(n_default) == min(8, int(kept)), (file, out)
        assert mv == n_mv and default == n_default and rejected == n_perturbed and int(ev) == int(n_mv), (file, out)
    assert re.search(r"^verdict digest [0-9a-f]{16}  \([\d.]+ s, 0 busy processes\)$", out, M), out


def test_bench_smollm2_runs_in_short_form(smollm2):
    """scripts/bench_smollm2.py (docs/real-model.md) --short on the real SmolLM2 weights: the HF engine, full
    fine-tuning and LoRA, 2 steps each (the first a warm-up) at 2 prompts x 2 rollouts of <= 8 tokens: one table row
    each. Not covered: its vllm rows (vLLM runs in its own venv; scripts/test_vllm.sh covers that engine)."""
    out = _script("bench_smollm2.py", "--engines", "hf", "--lora", "0,8", "--steps", 2, "--short",
                  env={"GDRO_SMOLLM2_DIR": str(smollm2)}, timeout=900).stdout
    rows = re.findall(r"^\| hf \| (full|LoRA r=8) \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \| [\d.]+ \| ([\d.]+) \| "
                      r"(\d+) \| \d+ \(1 \+ 1\) \|$", out, M)
    assert [r[0] for r in rows] == ["full", "LoRA r=8"] * 2, out  # each row as it comes, then the table
    assert all(float(step) > 0 for *_, step, _ in rows), out


def test_bench_offline_start_runs_in_short_form(smollm2):
    """scripts/bench_offline_start.py (docs/real-model.md) --short with no hub (HF_ENDPOINT at a closed port): the
    start-up table (a 1-step run with and without HF_HUB_OFFLINE, no hub retries) and the LoRA checkpoint's sizes."""
    out = _script("bench_offline_start.py", "--no-hub", "--short", env={"GDRO_SMOLLM2_DIR": str(smollm2)},
                  timeout=900).stdout
    starts = re.findall(r"^\| (HF_HUB_OFFLINE=1|no HF_HUB_OFFLINE) \| ([\d.]+) \| ([\d.]+) \| (\d+) \| 1 \|$", out, M)
    assert [s[0] for s in starts] == ["HF_HUB_OFFLINE=1", "no HF_HUB_OFFLINE"] and all(s[3] == "0" for s in starts), out
    assert "(acceptance: < 5 s)" in out, out
    total = _floats(r"^\| \*\*checkpoint\*\* \| \*\*([\d,]+)\*\* \| \*\*([\d.]+)%\*\* \|$", out)
    assert len(total) == 1 and total[0][0] > 0 and total[0][1] < 100, out
    assert re.search(r"^base reference: sha256 [0-9a-f]{64} over \d+ tensors", out, M), out
