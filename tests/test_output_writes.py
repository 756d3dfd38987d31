"""Issue #39 (4): a full disk or an unwritable place under the files ``gdro-report``, ``gdro-rescore`` and
``gdro-eval`` write is one line naming the path, status 74 (EX_IOERR), and leaves no empty or cut-short file.

Before: gdro-report said "No space left on device (ENOSPC)" and no path, leaving a 0-byte ``table.md``;
gdro-rescore said "[Errno 28] No space left on device", status 2, leaving a cut-short ``--out`` (or "[Errno 30]
Read-only file system: ...", status 2); gdro-eval wrote ``eval.json`` first, so a full disk left it beside a 0-byte
``samples.jsonl``, and a run dir on a full disk was Hydra's traceback (status 1) from its ``.hydra/config.yaml``.
Each file is now written whole or not at all (gdro.common.ioerrors.atomic_write: a temporary file beside it, then
``os.replace``), and ``eval.json`` is written last, so that it is there only when the evaluation finished.

The real commands run on real failures: ``/dev/full`` (a link to it, or named as ``--out``), a small tmpfs that is
full or read-only in a private mount namespace (``unshare -rm``: chmod does not stop root), a file where a directory
should be. The command-line cases are slow (each starts a command process).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from gdro.common.ioerrors import EXIT_IO_ERROR, atomic_write, atomic_write_text
from tests.test_failed_writes import _namespaces_work
from tests.test_report import make_run
from tests.test_resume import REPO, _env

BIN = Path(sys.executable).parent  # the console scripts, as a user runs them

# Run inside a private mount namespace (unshare -rm): a tmpfs of SIZE at MNT holding FILES, then full (``full``: no
# byte left; ``full:N``: N bytes left) or read-only (``read-only``); the command; its status, stderr, and the files
# left on the tmpfs (their sizes) as JSON
ON_A_TMPFS = """
import json, os, subprocess, sys
from pathlib import Path
mnt, size, how, result, files, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4]), \\
    json.loads(sys.argv[5]), json.loads(sys.argv[6])
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)
for rel, text in files.items():
    (mnt / rel).parent.mkdir(parents=True, exist_ok=True)
    (mnt / rel).write_text(text)
if how.startswith("full"):
    from tests.fill_disk import fill
    fill(mnt / "ballast", int(how.partition(":")[2] or 0))
elif how == "read-only":
    subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
left = {str(p.relative_to(mnt)): p.stat().st_size for p in sorted(mnt.rglob("*")) if p.is_file() and p.name != "ballast"}
result.write_text(json.dumps({"rc": done.returncode, "stderr": done.stderr, "files": left,
                              "texts": {k: (mnt / k).read_text() for k in files if (mnt / k).is_file()}}))
"""


def _on_a_tmpfs(tmp_path: Path, how: str, argv: list[str], files: dict[str, str] | None = None,
                size: str = "1m") -> dict:
    """``argv`` with a tmpfs at ``<tmp_path>/mnt`` (``how``: full, full:N, read-only, as it is) holding ``files``."""
    reason = _namespaces_work()
    if reason:
        pytest.skip(reason)
    mnt, result = tmp_path / "mnt", tmp_path / "result.json"
    mnt.mkdir(exist_ok=True)
    subprocess.run(["unshare", "-rm", sys.executable, "-c", ON_A_TMPFS, str(mnt), size, how, str(result),
                    json.dumps(files or {}), json.dumps(argv)], cwd=REPO, env=_env(), check=True, timeout=900)
    return json.loads(result.read_text())


def _lines(text: str) -> list[str]:
    """stderr's lines, without the progress bars transformers draws while it loads weights."""
    return [x for x in text.splitlines() if x.strip() and "it/s]" not in x and not x.startswith("Loading weights")]


def _dir_names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


# ------------------------------------------------------------------------------------- the helper, in this process
def test_a_failed_write_leaves_the_file_as_it_was_and_names_it(tmp_path):
    """A writer that fails midway (a full disk's ``write`` names no file): the old file stays whole, no temporary
    file is left, and the error names the file; a bug in the writer passes through as it is."""
    path = tmp_path / "out.jsonl"
    path.write_text("old\n")

    def full(fh):
        fh.write("new, cut short")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as err:
        atomic_write(path, full)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(path))
    with pytest.raises(ZeroDivisionError):
        atomic_write(path, lambda fh: 1 / 0)
    assert path.read_text() == "old\n" and _dir_names(tmp_path) == ["out.jsonl"]
    with pytest.raises(OSError) as err:  # absent: absent, not empty
        atomic_write(tmp_path / "new.md", full)
    assert err.value.filename == str(tmp_path / "new.md") and _dir_names(tmp_path) == ["out.jsonl"]


def test_a_link_to_dev_full_is_written_in_place_and_named(tmp_path):
    """A path that is no regular file (here a link to ``/dev/full``) is written in place, as ``open`` would: the
    error names the link; the link and the device stay as they were."""
    link = tmp_path / "table.md"
    link.symlink_to("/dev/full")
    with pytest.raises(OSError) as err:
        atomic_write_text(link, "x" * 100_000)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(link))
    assert os.readlink(link) == "/dev/full" and stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_write_replaces_a_links_target_and_keeps_the_files_mode(tmp_path):
    target, link = tmp_path / "real.csv", tmp_path / "link.csv"
    target.write_text("old")
    target.chmod(0o640)
    link.symlink_to(target)
    atomic_write_text(link, "a,b\n")
    assert link.is_symlink() and target.read_text() == "a,b\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    umask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "fig.png", lambda fh: fh.write(b"\x89PNG"), binary=True)
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "fig.png").stat().st_mode) == 0o644  # as open() would have made it
    assert sorted(_dir_names(tmp_path)) == ["fig.png", "link.csv", "real.csv"]


def test_a_file_where_the_directory_should_be_is_named(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError) as err:
        atomic_write_text(tmp_path / "file" / "out.md", "x")
    assert err.value.filename == str(tmp_path / "file" / "out.md")


def test_eval_json_is_written_last_and_an_earlier_one_goes_first(tmp_path):
    """gdro-eval's results: an earlier evaluation's eval.json goes before the new files are written, so a failure
    midway (here eval.md: a link to /dev/full) leaves no eval.json beside newer files; eval.json comes last."""
    from gdro.cli.evaluate import write_results

    (tmp_path / "eval.json").write_text('{"old": true}')
    (tmp_path / "eval.md").symlink_to("/dev/full")
    with pytest.raises(OSError) as err:
        write_results(tmp_path, {"metrics": {}}, [{"uid": "a"}], "| table |\n" * 10_000)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(tmp_path / "eval.md"))
    assert not (tmp_path / "eval.json").exists() and (tmp_path / "samples.jsonl").read_text() == '{"uid": "a"}\n'
    (tmp_path / "eval.md").unlink()
    write_results(tmp_path, {"metrics": {"m": 1}}, [], "| table |\n")
    assert json.loads((tmp_path / "eval.json").read_text()) == {"metrics": {"m": 1}}
    assert (tmp_path / "eval.json").stat().st_mtime_ns >= (tmp_path / "eval.md").stat().st_mtime_ns
    assert _dir_names(tmp_path) == ["eval.json", "eval.md", "samples.jsonl"]


# ------------------------------------------------------------------------------------------------- gdro-rescore
def _rescore_input(d: Path, n: int = 400) -> list[str]:
    """``n`` completions (their --out: ~40 KiB, more than a page the old file's may have left free)."""
    d.mkdir(exist_ok=True)
    with open(d / "bench.jsonl", "w") as bench, open(d / "gens.jsonl", "w") as gens:
        for i in range(n):
            bench.write(json.dumps({"problem": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}) + "\n")
            gens.write(json.dumps({"index": i, "completion": f"So \\boxed{{{2 * i + 1}}}."}) + "\n")
    return [str(BIN / "gdro-rescore"), str(d / "gens.jsonl"), "--benchmark", f"math500={d / 'bench.jsonl'}"]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["dev-full", "link-to-dev-full", "full-disk", "read-only", "file-in-the-way",
                                 "no-such-dir"])
def test_gdro_rescore_out_on_a_full_or_unwritable_place_is_one_line_naming_it_and_74(tmp_path, how):
    argv = _rescore_input(tmp_path / "in")
    mnt = tmp_path / "mnt"
    if how in ("full-disk", "read-only"):  # an earlier --out is there: it stays whole
        res = _on_a_tmpfs(tmp_path, how.replace("-disk", ""), [*argv, "--out", str(mnt / "out" / "out.jsonl")],
                          {"out/out.jsonl": "old\n"})
        rc, stderr = res["rc"], res["stderr"]
        named = mnt / "out" / "out.jsonl" if how == "full-disk" else mnt / "out"
        assert res["files"] == {"out/out.jsonl": 4} and res["texts"]["out/out.jsonl"] == "old\n", res
    else:
        (tmp_path / "file").write_text("x")
        (tmp_path / "link.jsonl").symlink_to("/dev/full")
        named, out = {"dev-full": ("/dev/full", "/dev/full"),
                      "link-to-dev-full": (tmp_path / "link.jsonl", tmp_path / "link.jsonl"),
                      "file-in-the-way": (tmp_path / "file", tmp_path / "file" / "out.jsonl"),
                      "no-such-dir": (tmp_path / "none", tmp_path / "none" / "out.jsonl")}[how]
        done = subprocess.run([*argv, "--out", str(out)], cwd=REPO, env=_env(), capture_output=True, text=True,
                              timeout=300, check=False)
        rc, stderr = done.returncode, done.stderr
        assert os.readlink(tmp_path / "link.jsonl") == "/dev/full" and not (tmp_path / "none").exists()
    what = {"full-disk": "No space left on device (ENOSPC)", "dev-full": "No space left on device (ENOSPC)",
            "link-to-dev-full": "No space left on device (ENOSPC)", "read-only": "Read-only file system (EROFS)",
            "file-in-the-way": "Not a directory (ENOTDIR)", "no-such-dir": "No such file or directory (ENOENT)"}[how]
    assert (rc, _lines(stderr)) == (EXIT_IO_ERROR, [f"gdro-rescore: error: {what}: {named}"])


# -------------------------------------------------------------------------------------------------- gdro-report
def _sweep(d: Path) -> Path:
    for m, (sampler, allocator) in enumerate([("uniform", "fixed"), ("prompt-gdro", "fixed")]):
        for seed in range(2):
            make_run(d, f"{sampler}-{allocator}-{seed}", sampler, allocator, seed, 40.0 + m + seed, gdro=True)
    return d


@pytest.mark.slow
@pytest.mark.parametrize("how", ["full", "full:32768", "read-only"], ids=["full", "room-for-the-tables", "read-only"])
def test_gdro_report_on_a_full_or_read_only_disk_is_one_line_naming_the_file_and_74(tmp_path, how):
    """The report into a tmpfs with no room, with room for the tables but not the figures, or read-only: one line
    naming the file (the directory, read-only), status 74; what is left is whole (no empty file, every PNG ends)."""
    sweep = _sweep(tmp_path / "sweep")
    res = _on_a_tmpfs(tmp_path, how, [str(BIN / "gdro-report"), str(sweep), "--out", str(tmp_path / "mnt" / "report")])
    lines = _lines(res["stderr"])
    assert res["rc"] == EXIT_IO_ERROR and len(lines) == 1, res
    where = {"full": "report/table.md", "full:32768": "report/eval_curves.png", "read-only": ""}[how]
    what = "Read-only file system (EROFS)" if how == "read-only" else "No space left on device (ENOSPC)"
    assert lines[0] == f"gdro-report: {what}: {tmp_path / 'mnt' / where}".rstrip("/"), lines
    assert all(size > 0 for size in res["files"].values()), res["files"]
    assert not [f for f in res["files"] if f.endswith(".tmp")], res["files"]
    if how == "full:32768":
        assert sorted(res["files"]) == ["report/table.csv", "report/table.md"]


# ---------------------------------------------------------------------------------------------------- gdro-eval
EVAL = ["eval.k=2", "eval.max_problems=8"]


@pytest.mark.slow
def test_gdro_eval_on_a_full_disk_is_one_line_naming_the_file_74_and_leaves_no_eval_json(tmp_path):
    """``out`` on a full disk: one line naming samples.jsonl (the first file written), status 74, and nothing left
    there (it used to leave eval.json, written first, beside a 0-byte samples.jsonl). The run dir on a full disk:
    one line naming .hydra/config.yaml (it was Hydra's traceback, status 1). And a run dir on a disk with room gets
    its .hydra files and results as before."""
    eval_ = str(BIN / "gdro-eval")
    mnt = tmp_path / "mnt"
    res = _on_a_tmpfs(tmp_path, "full", [eval_, *EVAL, f"out={mnt / 'eval'}", f"hydra.run.dir={tmp_path / 'run'}"])
    assert (res["rc"], _lines(res["stderr"])) == (
        EXIT_IO_ERROR, [f"error: No space left on device (ENOSPC): {mnt / 'eval' / 'samples.jsonl'}"]), res
    assert res["files"] == {}
    res = _on_a_tmpfs(tmp_path, "full", [eval_, *EVAL, f"hydra.run.dir={mnt / 'run'}"])
    assert (res["rc"], _lines(res["stderr"])) == (
        EXIT_IO_ERROR, [f"error: No space left on device (ENOSPC): {mnt / 'run' / '.hydra' / 'config.yaml'}"]), res
    assert all(size > 0 for f, size in res["files"].items() if not f.endswith(".log")), res["files"]
    run = tmp_path / "ok"
    done = subprocess.run([eval_, *EVAL, f"hydra.run.dir={run}"], cwd=REPO, env=_env(), capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert _dir_names(run / ".hydra") == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert "eval.k=2" in (run / ".hydra" / "overrides.yaml").read_text()
    assert {"eval.json", "eval.md", "samples.jsonl"} <= set(_dir_names(run))
