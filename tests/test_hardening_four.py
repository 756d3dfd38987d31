"""Issue #52 items 1-4 ("Hardening, round four"), each as a tester found it on a fresh clone: a model dir that loaded
wrong without a word (layers the weights do not have, a tokenizer without its tokenizer_config.json), a refused
start that rewrote the run's ``.hydra/`` files, tracebacks left (no usable chat template, a meta.json without its
config), and the small ones (a Ctrl-C while the end-of-run checkpoint is written, two nonsense settings accepted,
messages that named the wrong thing, gdro-report's stale temp files, sample records without their rollout index).
Real files throughout: copies of the shipped tiny model, edited; real run dirs; the entry points run in this process
as tests/test_user_errors.py runs them."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from gdro.algorithm import samples
from gdro.cli import app, report
from gdro.cli import evaluate as evaluator
from gdro.cli import train as cli
from gdro.compose.build import build_training
from gdro.models.dir_checks import missing_parts, model_dir_problem
from gdro.models.source import TINY_DIR
from gdro.run import lifecycle
from gdro.run.lifecycle import StopRequest
from gdro.run.lock import hold
from tests.conftest import FAST, compose_cfg
from tests.test_user_errors import EVAL, _main, finished  # noqa: F401 (finished: a fixture, a completed 2-step run)


@pytest.fixture(autouse=True)
def _no_full_error(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)


def _edit_config(d: Path, **changes) -> None:
    config = json.loads((d / "config.json").read_text())
    config.update(changes)
    (d / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    """Copies of the tiny model (4 layers), each wrong in one way: ``layers2`` / ``layers6`` (config.json:
    num_hidden_layers 2 or 6, no layer_types), ``no_tokenizer_config``, ``no_eos`` (tokenizer_config.json without
    eos_token), ``no_template`` / ``empty_template`` / ``dir_template`` (chat_template.jinja gone, empty, a
    directory), ``latin1_template`` (not UTF-8), ``list_config`` (config.json a JSON list)."""
    root = tmp_path_factory.mktemp("models")
    names = ("layers2", "layers6", "no_tokenizer_config", "no_eos", "no_template", "empty_template", "dir_template",
             "latin1_template", "list_config")
    out = {name: root / name for name in names}
    for d in out.values():
        shutil.copytree(TINY_DIR, d)
    _edit_config(out["layers2"], num_hidden_layers=2, layer_types=None)
    _edit_config(out["layers6"], num_hidden_layers=6, layer_types=None)
    (out["no_tokenizer_config"] / "tokenizer_config.json").unlink()
    tc = json.loads((out["no_eos"] / "tokenizer_config.json").read_text())
    (out["no_eos"] / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in tc.items() if k != "eos_token"}))
    (out["no_template"] / "chat_template.jinja").unlink()
    (out["empty_template"] / "chat_template.jinja").write_text("")
    (out["dir_template"] / "chat_template.jinja").unlink()
    (out["dir_template"] / "chat_template.jinja").mkdir()
    (out["latin1_template"] / "chat_template.jinja").write_bytes("{{ 'café' }}".encode("latin-1"))
    (out["list_config"] / "config.json").write_text("[1, 2]")
    return out


LOAD_CASES = [  # (model dir, what the one line says: {d} is the dir)
    pytest.param("layers2", "'{d}/config.json' does not match its weights: num_hidden_layers is 2 but the weights "
                 "hold 4 layers", id="layers2"),
    pytest.param("layers6", "'{d}/config.json' does not match its weights: num_hidden_layers is 6 but the weights "
                 "hold 4 layers", id="layers6"),
    pytest.param("no_tokenizer_config", "'{d}' is not a complete model directory: no tokenizer_config.json",
                 id="no_tokenizer_config"),
    pytest.param("no_eos", "'{d}/tokenizer_config.json' names no eos_token", id="no_eos"),
    pytest.param("no_template", "'{d}' has no chat template (no chat_template.jinja", id="no_template"),
    pytest.param("empty_template", "'{d}/chat_template.jinja' is not a working chat template (it is empty",
                 id="empty_template"),
    pytest.param("dir_template", "'{d}/chat_template.jinja' is a directory, not a chat template", id="dir_template"),
    pytest.param("latin1_template", "'{d}/chat_template.jinja' is not UTF-8 text", id="latin1_template"),
    pytest.param("list_config", "'{d}/config.json' is not a model config (a JSON list, not an object)",
                 id="list_config"),
]


# ----------------------------------------------------------------- item 1: silent loads; item 3: template tracebacks
@pytest.mark.parametrize(("name", "says"), LOAD_CASES)
def test_gdro_eval_refuses_a_model_dir_that_would_load_wrong_in_one_line(dirs, name, says, tmp_path, monkeypatch,
                                                                         capsys):
    d = dirs[name]
    code, lines = _main(evaluator.main, ["gdro-eval", *EVAL, f"checkpoint={d}", f"hydra.run.dir={tmp_path}/e"],
                        monkeypatch, capsys)
    assert code == 2 and len(lines) == 1 and says.format(d=d) in lines[0], lines
    assert not (tmp_path / "e" / "eval.json").exists()


@pytest.mark.parametrize("name", ["layers2", "no_template"])  # refused in the job, once the model dir is read
def test_a_refused_gdro_eval_changes_no_file_of_an_earlier_evaluation(dirs, name, tmp_path, monkeypatch, capsys):
    """An evaluation dir that holds an earlier evaluation (its .hydra/, log, samples, eval.json): a second gdro-eval
    into it, refused because its model dir would load wrong, leaves every file as it was (.hydra/ and the log are
    written once the model has passed its checks)."""
    out = tmp_path / "e"
    code, _ = _main(evaluator.main, ["gdro-eval", *EVAL, f"hydra.run.dir={out}"], monkeypatch, capsys)
    assert code in (0, None) and (out / "eval.json").is_file() and (out / app.HYDRA_SUBDIR / "overrides.yaml").is_file()
    before = _digest(out)
    code, lines = _main(evaluator.main, ["gdro-eval", *EVAL, f"checkpoint={dirs[name]}",
                                         f"hydra.run.dir={out}"], monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert _digest(out) == before


@pytest.mark.parametrize(("name", "says"), [c for c in LOAD_CASES if c.id in ("layers2", "layers6",
                                                                               "no_tokenizer_config", "no_template")])
def test_gdro_train_refuses_a_model_dir_that_would_load_wrong_in_one_line(dirs, name, says, tmp_path, monkeypatch,
                                                                          capsys):
    d = dirs[name]
    code, lines = _main(cli.train, ["gdro-train", *FAST, f"model.name_or_path={d}", f"hydra.run.dir={tmp_path}"],
                        monkeypatch, capsys)
    assert code == 2 and len(lines) == 1 and says.format(d=d) in lines[0], lines
    assert not (tmp_path / "metrics.jsonl").exists()  # no step trained


def test_a_model_without_a_chat_template_loads_when_the_run_does_not_need_one(dirs):
    from gdro.models.loading import ModelSpec, load_tokenizer

    tok = load_tokenizer(ModelSpec(str(dirs["no_template"]), max_prompt_len=64, max_new_tokens=4,
                                   use_chat_template=False))
    assert tok.eos_token == "<|im_end|>"


def test_the_final_save_check_requires_what_a_load_requires(dirs):
    assert missing_parts(TINY_DIR) == []
    assert missing_parts(dirs["no_tokenizer_config"]) == ["tokenizer_config.json"]
    assert model_dir_problem(TINY_DIR) is None


# --------------------------------------------------------------------------- item 2: a refused start writes nothing
def _digest(run_dir: Path) -> dict[str, str]:
    """Every file under ``run_dir``, its lock included, hashed."""
    return {str(p.relative_to(run_dir)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(run_dir.rglob("*")) if p.is_file()}


def _cut_short(ckpt: Path) -> None:
    (ckpt / "policy.pt").write_bytes((ckpt / "policy.pt").read_bytes()[:1000])


def _damaged_inside(ckpt: Path) -> None:  # one byte of a tensor flipped: the zip directory is intact
    data = bytearray((ckpt / "policy.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (ckpt / "policy.pt").write_bytes(bytes(data))


def _optimizer_missing(ckpt: Path) -> None:
    (ckpt / "optimizer.pt").unlink()


def _trainer_state_unreadable(ckpt: Path) -> None:  # a whole zip that torch.load cannot read (no data.pkl)
    import zipfile

    with zipfile.ZipFile(ckpt / "trainer.pt", "w") as zf:
        zf.writestr("x/other", b"not a pickle")


@pytest.mark.parametrize(("extra", "damage"), [
    (["optim.lr=0.5"], None), (["resume=false"], None), ([], _cut_short), ([], _damaged_inside),
    ([], _optimizer_missing), ([], _trainer_state_unreadable)],
    ids=["changed-key", "resume-false", "policy-cut-short", "policy-damaged-inside", "optimizer-missing",
         "trainer-unreadable"])
def test_a_refused_resume_changes_no_file_in_the_run_dir(finished, extra, damage, tmp_path, monkeypatch,  # noqa: F811
                                                         capsys):
    """Refused before the start is accepted, whether by the resume checks, a file cut short or damaged inside
    (gdro.run.checkpoint.check_whole), or a state that cannot be loaded into the trainer (gdro.run.lifecycle.restore,
    before gdro-train writes ``.hydra/`` and the run record)."""
    src, overrides = finished
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    if damage is not None:
        damage(run_dir / "checkpoints" / "step_000002")
    (run_dir / app.HYDRA_SUBDIR).mkdir(exist_ok=True)  # as gdro-train leaves them (the fixture ran without Hydra)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run_dir / app.HYDRA_SUBDIR / name).write_text(f"# {name} of the first start\n")
    before = _digest(run_dir)
    code, lines = _main(cli.train, ["gdro-train", *overrides, *extra, f"hydra.run.dir={run_dir}"], monkeypatch, capsys)
    assert code == 2 and len(lines) == 1, lines
    assert _digest(run_dir) == before


# ---------------------------------------------------------------------- item 3: a meta.json without its config
def test_a_checkpoint_meta_json_without_its_config_is_one_line(finished, tmp_path, monkeypatch, capsys):  # noqa: F811
    src, overrides = finished
    run_dir = tmp_path / "run"
    shutil.copytree(src, run_dir)
    meta = run_dir / "checkpoints" / "step_000002" / "meta.json"
    meta.write_text(json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "config"}))
    code, lines = _main(cli.train, ["gdro-train", *overrides, f"hydra.run.dir={run_dir}"], monkeypatch, capsys)
    assert code == 2 and len(lines) == 1 and f"{meta.parent}: meta.json" in lines[0] and "(no config)" in lines[0], lines


# ------------------------------------------------------------ item 4a: a Ctrl-C during the end-of-run checkpoint
@pytest.fixture(scope="module")
def stopped_at_the_end(tmp_path_factory) -> Path:
    """A 2-step run (samples of every step) that gets a Ctrl-C while its end-of-run checkpoint is written: after
    the last row, as a user's Ctrl-C lands there (the checkpoint writer is the lifecycle's documented fault point)."""
    run_dir = tmp_path_factory.mktemp("stopped")
    stop = StopRequest()
    real = lifecycle.save_checkpoint

    def ctrl_c_then_save(run, step, *args, **kwargs):
        if step == 2:
            stop.signum = 2  # what StopRequest's handler records for a first SIGINT
        return real(run, step, *args, **kwargs)

    lifecycle.save_checkpoint = ctrl_c_then_save
    try:
        with hold(run_dir):
            training = build_training(compose_cfg([*FAST, "checkpoint.every=0", "samples.every=1"]), run_dir)
            training.lifecycle.stop = stop
            try:
                training.fit()
            except lifecycle.Interrupted:
                pass
            finally:
                training.logger.close()
    finally:
        lifecycle.save_checkpoint = real
    return run_dir


def test_a_ctrl_c_while_the_last_checkpoint_is_written_leaves_the_run_completed(stopped_at_the_end):
    record = json.loads((stopped_at_the_end / "run.json").read_text())
    assert record["status"] == "completed" and record["last_step"] == 2, record


# ------------------------------------------------------------------------ item 4e: sample records' rollout index
def test_sample_records_carry_their_rollout_index_within_the_group(stopped_at_the_end):
    recs = samples.read(samples.path_of(stopped_at_the_end, "train", 1))
    assert recs and all(isinstance(r["rollout"], int) and 0 <= r["rollout"] < r["n"] for r in recs), recs
    assert "rollout" in samples.COLUMNS


# ------------------------------------------------------------------ item 4b and 4c: settings refused, messages
PRECHECK_CASES = [  # (overrides, what the one line says)
    (["optim.engine_is_mode=sequence_mask", "optim.engine_is_max=null"],
     "optim.engine_is_mode=sequence_mask: needs engine_is_max or engine_is_min (a bound)"),
    (["optim.engine_is_mode=sequence_truncate", "optim.engine_is_max=null"],
     "optim.engine_is_mode=sequence_truncate: needs engine_is_max or engine_is_min (a bound)"),
    (["reward.overlong_buffer=4", "reward.overlong_max_tokens=100"],
     "reward.overlong_max_tokens=100: more than model.max_new_tokens=16"),
    (["samples=5"], "samples=5: must be a block of keys (every, train, eval)"),
    (["samples.every=-1"], "samples.every=-1: must be an integer >= 0"),
    (["+samples.foo=1"], "unknown key 'samples.foo' (valid keys of samples: every, train, eval)"),
]


@pytest.mark.parametrize(("overrides", "says"), PRECHECK_CASES)
def test_a_nonsense_setting_is_refused_in_one_line_naming_its_key(overrides, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        app.precheck(overrides, "train", cli._check_train)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert exit_.value.code == 2 and len(lines) == 1 and lines[0].startswith(f"config error: {says}"), lines


def test_a_sample_file_that_cannot_be_written_is_named_not_its_temp_file(tmp_path):
    (tmp_path / samples.SAMPLES_DIR / ".train_000003.jsonl.tmp").mkdir(parents=True)  # its temp file cannot be opened
    with pytest.raises(OSError) as err:
        samples.write(tmp_path, "train", 3, [{"a": 1}])
    assert err.value.filename == str(samples.path_of(tmp_path, "train", 3)), err.value


# ----------------------------------------------------------------------------- item 4d: gdro-report's temp files
def test_gdro_report_removes_the_temp_files_a_ctrl_c_left(finished, tmp_path, capsys):  # noqa: F811
    sweep = tmp_path / "sweep"
    shutil.copytree(finished[0], sweep / "0")
    out = sweep / "report"
    out.mkdir()
    stale = [out / ".table.md.k2j4x_9a.tmp", out / ".paired.md.abcdefgh.tmp"]
    for path in stale:
        path.write_bytes(b"")
    (out / ".notes.tmp").write_text("a user's own file")  # not one of the report's: kept
    assert report.main([str(sweep)]) == 0
    capsys.readouterr()
    assert not any(p.exists() for p in stale) and (out / ".notes.tmp").exists()


@pytest.mark.parametrize("module", ["gdro.cli.train", "gdro.cli"])
def test_a_sweep_job_refused_under_python_dash_m_is_reported_not_silent(tmp_path: Path, module: str):
    """``python -m gdro.cli.train -m ...`` (as torchrun and the docs run it) ran the module twice, as ``__main__`` and
    as the ``gdro.cli.train`` that Hydra's SweepReport callback names: the refused job was recorded in one copy and the
    sweep's report read the other, so the sweep exited 0 saying nothing. Now: one line naming the job, status 2."""
    import subprocess
    import sys

    from tests.test_resume import REPO, _env

    out = subprocess.run([sys.executable, "-m", module, "-m", "prompts_per_step=1", "dist.shards=2", "steps=1",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=REPO, env=_env(), capture_output=True,
                         text=True, timeout=300, check=False)
    lines = [x for x in out.stderr.splitlines() if x.startswith("gdro-train:")]
    assert out.returncode == 2, out.stderr[-2000:]
    line = ("gdro-train: sweep job #0 (prompts_per_step=1 dist.shards=2 steps=1) did not run: config error: "
            "dist.shards=2: more shards than prompts_per_step=1")
    assert lines == [line], out.stderr[-2000:]
