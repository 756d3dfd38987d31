"""``gdro-rescore``'s usage errors are one line on stderr, status 2, as ``gdro-report``'s (issue #28 B7): argparse
printed its 3-line usage block first. Its own errors (a missing file, an unknown benchmark) were one line already
and stay so. The entry point runs in this process (``SystemExit`` caught)."""

from __future__ import annotations

import pytest

from gdro.cli import rescore


def _main(argv: list[str], capsys) -> tuple[int, list[str]]:
    try:
        code = rescore.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, [line for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize(("argv", "says"), [
    ([], "the following arguments are required: completions, --benchmark (see gdro-rescore --help)"),
    (["{gens}"], "the following arguments are required: --benchmark"),
    (["{gens}", "--benchmark"], "argument --benchmark: expected one argument"),
    (["{gens}", "--benchmark", "minerva", "--window"], "argument --window: expected one argument"),
    (["{gens}", "--benchmark", "minerva", "--bogus"], "unrecognized arguments: --bogus"),
    (["{gens}", "--benchmark", "nope"], "--benchmark nope: unknown benchmark 'nope'"),
    (["{tmp}/none.jsonl", "--benchmark", "minerva"], "{tmp}/none.jsonl: no such file"),
], ids=["nothing", "no-benchmark", "benchmark-without-value", "window-without-value", "unknown-option",
        "unknown-benchmark", "no-such-file"])
def test_a_gdro_rescore_usage_error_is_one_line(argv, says, tmp_path, capsys):
    gens = tmp_path / "gens.jsonl"
    gens.write_text('{"uid": "minerva/test/#0", "completion": "\\\\boxed{1}"}\n')
    names = {"gens": gens, "tmp": tmp_path}
    code, lines = _main([a.format(**names) for a in argv], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("gdro-rescore: error: ") and says.format(**names) in lines[0], lines
