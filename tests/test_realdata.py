"""The loaders and the reward on real copies of the paper's benchmarks (``../shared/realdata/``, beside the project).

Third-party files, read in place and never copied into the project: every file loads to its true size with the
loader's defaults, every gold matches itself, a perturbed gold does not, and each defect found on real rows has
a test on that row. ``GDRO_REALDATA`` points elsewhere; without the directory these tests skip with a reason.
GPQA-Diamond is not published in plain text: its loader is tested on a CSV of our own with the real schema.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from gdro.data.benchmark_specs import MATH_SUFFIX
from gdro.data.benchmarks import load_benchmark
from gdro.grading.answers import last_boxed
from gdro.grading.golds import ALT_SEP, BOXED
from gdro.grading.rewards import MathVerifyReward

REPO = Path(__file__).resolve().parent.parent
REALDATA = Path(os.environ.get("GDRO_REALDATA", REPO.parent / "shared" / "realdata"))
FIXTURES = REPO / "tests" / "fixtures" / "benchmarks"

needs_realdata = pytest.mark.skipif(
    not REALDATA.is_dir(), reason=f"real benchmark copies not found ({REALDATA.name}/ beside the project; GDRO_REALDATA)"
)
pytestmark = needs_realdata

# file -> (benchmark, true size): the rows of each file (the README of realdata/ and the line counts agree)
FILES = {
    "math500.jsonl": ("math500", 500),
    "aime2024.jsonl": ("aime2024", 30),
    "aime2025.jsonl": ("aime2025", 30),
    "amc23.jsonl": ("amc23", 40),
    "minerva.jsonl": ("minerva", 272),
    "olympiadbench.jsonl": ("olympiadbench", 675),
    "dapo_math_processed_sample.jsonl": ("dapo_math", 14),
    "dapo_math_chat_sample.jsonl": ("dapo_math", 5),
}
INT = re.compile(r"\d+")

_loaded: dict[str, tuple] = {}


def load(file: str, **overrides):
    key = file + json.dumps(overrides, sort_keys=True)
    if key not in _loaded:
        _loaded[key] = load_benchmark(FILES[file][0], data_files=str(REALDATA / file), **overrides)
    return _loaded[key]


def reward_for(report, **kwargs) -> MathVerifyReward:
    r = MathVerifyReward(**kwargs)
    r.use_golds(report.golds)
    return r


def gold_of(file: str, raw: str) -> str:
    """The prepared gold of the real row whose gold is ``raw`` (one row, asserted)."""
    problems, _ = load(file)
    hits = [p.answer for p in problems if p.answer == raw]
    assert len(hits) == 1, f"{raw!r}: {len(hits)} rows in {file}"
    return hits[0]


def verdicts(file: str, gold: str, answers: list[str], **kwargs) -> list[bool]:
    _, report = load(file)
    r = reward_for(report, fast_path=False, **kwargs)
    return r.score([f"The answer is \\boxed{{{a}}}." for a in answers], [gold] * len(answers),
                   [True] * len(answers)).correct.tolist()


@pytest.mark.parametrize("file", list(FILES))
def test_every_file_loads_to_its_true_size_with_defaults(file):
    lines = sum(1 for line in (REALDATA / file).read_bytes().splitlines() if line.strip())
    problems, report = load(file)
    assert lines == FILES[file][1] == report.rows_read == report.kept == len(problems)
    assert report.n_skipped == 0 and not report.malformed_lines
    assert len({p.uid for p in problems}) == len(problems)


@pytest.mark.parametrize("file", list(FILES))
def test_every_gold_matches_itself_and_a_perturbed_gold_does_not(file):
    problems, report = load(file)
    golds = [p.answer for p in problems]
    for fast in (True, False):  # the exact-match path and math-verify's own
        r = reward_for(report, fast_path=fast)
        b = r.score([f"So \\boxed{{{g}}}" for g in golds], golds, [True] * len(golds))
        assert b.correct.all() and b.n_bad_gold == 0 and b.n_timeout == 0 and b.n_error == 0, [
            g for g, ok in zip(golds, b.correct) if not ok]
    # no gold is compared as text without a report: those math-verify cannot read are counted and named
    text_only = [g for g in golds if r.prepare(g).text_only]
    assert sorted(set(text_only)) == sorted(report.golds.text_only)
    assert f"{len(report.golds.text_only)} compared as normalised text" in report.summary() or not report.golds.golds
    # perturbed: the first integer of the gold + 1
    pairs = [(g, g[: m.start()] + str(int(m.group()) + 1) + g[m.end():]) for g in golds if (m := INT.search(g))]
    assert len(pairs) >= 0.9 * len(golds)
    b = r.score([f"So \\boxed{{{p}}}" for _, p in pairs], [g for g, _ in pairs], [True] * len(pairs))
    assert not b.correct.any(), [pair for pair, ok in zip(pairs, b.correct) if ok]


def test_every_benchmark_file_there_is_covered_and_the_qwen_minerva_golds_match_themselves():
    """Every benchmark file of the real copies is in FILES, or (the Qwen harness's Minerva copy, which needs
    solution_key) scored here: every gold matches itself as a box, on both paths, with no timeout."""
    assert {p.name for p in REALDATA.glob("*.jsonl")} == {*FILES, "minerva_qwen_eval.jsonl"}
    problems, report = load_benchmark("minerva", data_files=str(REALDATA / "minerva_qwen_eval.jsonl"),
                                      solution_key="solution")
    golds = [p.answer for p in problems]
    for fast in (True, False):
        b = reward_for(report, fast_path=fast).score([f"So \\boxed{{{g}}}" for g in golds], golds, [True] * len(golds))
        assert b.correct.all() and b.n_timeout == 0 and b.n_error == 0, [g for g, ok in zip(golds, b.correct) if not ok]


def test_minerva_python_floats_are_their_value():
    """58 of Minerva's golds are Python floats: math-verify read 4.5e33 as 4.5·e·33, so no answer could match."""
    gold = gold_of("minerva.jsonl", "4.5e33")
    assert verdicts("minerva.jsonl", gold, ["4.5 \\times 10^{33}", "4.5e33", "4.5\\cdot10^{33}",
                                            "4500000000000000000000000000000000", "4.5 \\times 10^{32}",
                                            "4.6 \\times 10^{33}", "4.5e34"]) == [True] * 4 + [False] * 3
    gold = gold_of("minerva.jsonl", "1e-5")
    assert verdicts("minerva.jsonl", gold, ["0.00001", "10^{-5}", "1 \\times 10^{-5}", "0.0001", "1e-6"]) == [
        True] * 3 + [False] * 2
    gold = gold_of("minerva.jsonl", "-1./3")
    assert verdicts("minerva.jsonl", gold, ["-\\frac{1}{3}", "-1/3", "\\frac{1}{3}", "-\\frac{1}{2}"]) == [
        True, True, False, False]
    gold = gold_of("minerva.jsonl", "-3./2")
    assert verdicts("minerva.jsonl", gold, ["-1.5", "-\\frac{3}{2}", "-\\frac{2}{3}"]) == [True, True, False]


def test_minerva_small_numbers_are_compared_relative_to_their_size():
    """math-verify matched any two numbers below its precision: 2.88e-20 scored right against 2.88e-19."""
    gold = gold_of("minerva.jsonl", "2.88e-19")
    assert verdicts("minerva.jsonl", gold, ["2.88 \\times 10^{-19}", "2.88e-19", "2.88 \\times 10^{-20}",
                                            "2.9 \\times 10^{-19}", "0.000000000000000000288",
                                            "0.000000000000000000029"]) == [True, True, False, False, True, False]


def test_percent_golds_keep_their_meaning_both_ways():
    for raw in ("17.5%", "8 \\%"):
        gold = gold_of("olympiadbench.jsonl", raw)
        value = raw.split("%")[0].rstrip(" \\")
        frac = str(float(value) / 100)
        assert verdicts("olympiadbench.jsonl", gold, [value, f"{value}\\%", f"{value}%", frac, f"{value} \\%",
                                                       str(float(value) + 1), f"{float(value) + 1}\\%"]) == [
            True] * 5 + [False] * 2, raw
    # a gold without a percent sign (OlympiadBench gives the unit apart) against an answer with one
    problems, _ = load("olympiadbench.jsonl")
    rows = [json.loads(line) for line in (REALDATA / "olympiadbench.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r["unit"] == "%"]
    gold = problems[rows.index(row)].answer
    assert verdicts("olympiadbench.jsonl", gold, [f"{gold}\\%", gold, f"{gold}%", f"{float(gold) + 1}\\%"]) == [
        True, True, True, False]


def test_percent_words_count_as_a_percent_sign():
    """``28 pct`` and ``28 percentage`` scored wrong against ``28\\%`` while ``28 percent`` scored right."""
    for raw in ("17.5%", "8 \\%", "62.5%"):
        gold = gold_of("olympiadbench.jsonl", raw)
        value = raw.split("%")[0].rstrip(" \\")
        wrong = str(float(value) + 1)
        assert verdicts("olympiadbench.jsonl", gold, [
            f"{value} pct", f"{value} percentage", f"{value}\\text{{ pct}}", f"{value}\\ \\text{{percentage}}",
            f"{value} percent", f"{value}\\%", f"{wrong} pct", f"{wrong} percentage", f"{wrong}\\text{{ pct}}"]) == [
            True] * 6 + [False] * 3, raw
    # the gold of the report, 28\\%: a percent word reads both ways, like the sign (28 and 0.28)
    assert MathVerifyReward(fast_path=False).score(
        ["\\boxed{28 pct}", "\\boxed{28 percentage}", "\\boxed{0.28}", "\\boxed{29 pct}"], ["28\\%"] * 4,
        [True] * 4).correct.tolist() == [True, True, True, False]


def test_numbers_as_people_write_them_thousands_and_unit_text():
    """Minerva's 15000 (kcal m^-2 yr^-1) and 1000 (rad/s): thousands grouped by a space and plain unit text after
    the number scored wrong; a comma or \\text{} units already scored right."""
    gold = gold_of("minerva.jsonl", "15000")
    assert verdicts("minerva.jsonl", gold, [
        "15,000 kcal/m^2/yr", "15,000 kcal m^{-2} yr^{-1}", "15,000 \\ kcal", "15 000", "15\\,000 \\mathrm{kcal}",
        "15{,}000 \\text{ kcal}", "15,000", "16,000 kcal/m^2/yr", "15 001", "1,500 kcal", "150 000"]) == [
        True] * 7 + [False] * 4
    gold = gold_of("minerva.jsonl", "1000")
    assert verdicts("minerva.jsonl", gold, [
        "1 000", "1\\,000", "1\\,000 \\text{ rad/s}", "1000 rad/s", "1 000 rad/s", "1000 \\mathrm{rad/s}",
        "1 001", "100 rad/s", "10 000", "1000 x"]) == [True] * 6 + [False] * 4


def test_minerva_e_notation_golds_compare_at_their_significant_figures():
    """A Minerva gold in e-notation is a measured quantity given to its significant figures: an answer that rounds to
    it there is right (hand-checked truth). Exact golds keep exact comparison."""
    cases = {
        "3.3e12": (["3.275 \\times 10^{12}", "3.3 \\times 10^{12}", "3.31e12", "3.25 \\times 10^{12}"],
                   ["3.2 \\times 10^{12}", "3.4\\times10^{12}", "3.275 \\times 10^{13}", "3 \\times 10^{12}"]),
        "4.6e-24": (["4.57 \\times 10^{-24}", "4.6 \\times 10^{-24}", "4.64e-24"],
                    ["4.5 \\times 10^{-24}", "4.7e-24", "4.57 \\times 10^{-23}", "4.57"]),
        "2.75e11": (["2.7525 \\times 10^{11}", "2.745\\times10^{11}", "275000000000"],
                    ["2.76 \\times 10^{11}", "2.7 \\times 10^{11}", "2.7525 \\times 10^{12}"]),
    }
    for raw, (right, wrong) in cases.items():
        gold = gold_of("minerva.jsonl", raw)
        assert verdicts("minerva.jsonl", gold, right + wrong) == [True] * len(right) + [False] * len(wrong), raw
    # exact golds: no rounding at their figures
    assert verdicts("minerva.jsonl", gold_of("minerva.jsonl", "0.5"), ["0.5", "\\frac{1}{2}", "0.49", "0.51",
                                                                      "0.501"]) == [True, True, False, False, False]
    assert verdicts("minerva.jsonl", gold_of("minerva.jsonl", "2.88e-19"), ["2.9 \\times 10^{-19}"]) == [False]


def test_several_boxes_for_golds_of_several_items_join_in_evaluation_on_request(tmp_path):
    """Real golds of several items, each item boxed apart: wrong under the last-box contract (training, and
    evaluation by default); right in evaluation with ``reward.eval_boxes=join``; a wrong or missing item stays wrong."""
    cases = {  # file -> (gold, the items as a model boxes them, a wrong item)
        "olympiadbench.jsonl": ("(1,1), (3,2)", ["(1,1)", "(3,2)"], "(3,3)"),
        "math500.jsonl": ("3, 5, 7", ["3", "5", "7"], "9"),
    }
    for file, (raw, items, bad) in cases.items():
        gold = gold_of(file, raw)
        _, report = load(file)
        texts = [" and ".join(f"$\\boxed{{{i}}}$" for i in items), ", ".join(f"\\boxed{{{i}}}" for i in items),
                 " and ".join(f"$\\boxed{{{i}}}$" for i in [*items[:-1], bad]),
                 " and ".join(f"$\\boxed{{{i}}}$" for i in items[:-1])]
        expected = [True, True, False, False]
        assert reward_for(report).score(texts, [gold] * 4, [True] * 4).correct.tolist() == [False] * 4
        assert reward_for(report).for_eval().score(texts, [gold] * 4, [True] * 4).correct.tolist() == [False] * 4
        joined = reward_for(report, eval_boxes="join")
        assert joined.score(texts, [gold] * 4, [True] * 4).correct.tolist() == [False] * 4  # training: last box
        assert joined.for_eval().score(texts, [gold] * 4, [True] * 4).correct.tolist() == expected, file
    # gdro-rescore's scorer is the reward's evaluation form: a reward built with the key joins there too
    from gdro.cli.rescore import rescore

    problems, _ = load("olympiadbench.jsonl")
    (p,) = [p for p in problems if p.answer == "(1,1), (3,2)"]
    comp = tmp_path / "gens.jsonl"
    comp.write_text(json.dumps({"uid": p.uid, "completion": "$\\boxed{(1,1)}$ and $\\boxed{(3,2)}$"}) + "\n")
    bench = [f"olympiadbench={REALDATA / 'olympiadbench.jsonl'}"]
    assert rescore(str(comp), bench)["olympiadbench"]["mean"] == 0.0
    assert rescore(str(comp), bench, reward=MathVerifyReward(eval_boxes="join"))["olympiadbench"]["mean"] == 100.0
    # and on the command line: gdro-rescore --boxes join
    from gdro.cli.rescore import main as rescore_main

    for boxes, verdict in (("last", False), ("join", True)):
        out = tmp_path / f"verdicts-{boxes}.jsonl"
        assert rescore_main([str(comp), "--benchmark", bench[0], "--boxes", boxes, "--out", str(out)]) == 0
        assert [json.loads(line)["correct"] for line in out.read_text().splitlines()] == [verdict], boxes


def test_evaluation_reads_the_whole_completion_training_its_window():
    problems, report = load("math500.jsonl")
    p = problems[0]
    check = "\n\nLet me double-check this numerically.\n```python\nimport math\nprint(math.hypot(0, 3))\n```\n" \
            "The output is 3.0, consistent with r = 3, and the angle is pi/2 since the point is on the y-axis.\n" * 2
    text = f"Step by step ... so the answer is \\boxed{{{p.answer}}}.{check}"
    assert len(text) - text.rindex("\\boxed") > 300
    train = reward_for(report)
    assert train.score([text], [p.answer], [True]).correct.tolist() == [False]  # the official 300-character window
    assert train.for_eval().score([text], [p.answer], [True]).correct.tolist() == [True]
    assert reward_for(report, tail_chars=None).score([text], [p.answer], [True]).correct.tolist() == [True]


def test_long_golds_are_prepared_without_a_time_bound():
    """The slowest Minerva gold takes up to a second to parse cold: under a time bound it was counted as a bad gold
    when the machine was busy. Golds are prepared at load, unbounded; an absurdly short bound on model text leaves
    the gold's verdict alone."""
    problems, report = load("minerva.jsonl")
    longest = max((p.answer for p in problems), key=len)
    assert longest in report.golds.golds and not report.golds.golds[longest].text_only
    r = reward_for(report, timeout_s=1e-6)
    b = r.score([f"\\boxed{{{longest}}}"], [longest], [True])
    assert b.correct.tolist() == [True] and b.n_bad_gold == 0
    # a gold met first while scoring is prepared then, unbounded as well
    fresh = MathVerifyReward(timeout_s=1e-6)
    assert fresh.score([f"\\boxed{{{longest}}}"], [longest], [True]).n_bad_gold == 0


def test_golds_math_verify_cannot_read_are_reported_and_compared_as_normalised_text():
    _, report = load("olympiadbench.jsonl")
    assert report.golds.text_only == ["t(0,4]"] and "1 compared as normalised text ('t(0,4]')" in report.summary()
    assert verdicts("olympiadbench.jsonl", "t(0,4]", ["t(0,4]", "t (0, 4]", "t(0,5]", "t(0,4)"]) == [
        True, True, False, False]
    # Minerva's E_{1},E_{2}: read as symbols (not Euler's number), so a space no longer decides the verdict
    gold = gold_of("minerva.jsonl", "E_{1},E_{2}")
    assert verdicts("minerva.jsonl", gold, ["E_{1}, E_{2}", "E_1,E_2", "E_{1},E_{3}", "E_{1}"]) == [
        True, True, False, False]
    gold = gold_of("minerva.jsonl", "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}")
    assert verdicts("minerva.jsonl", gold, ["\\frac{E_1+2E_2}{3}", "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{3}",
                                            "\\frac{2}{3}"]) == [True, False, False]


def test_dapo_chat_format_loads_with_defaults():
    chat, _ = load("dapo_math_chat_sample.jsonl")
    rows = [json.loads(line) for line in (REALDATA / "dapo_math_chat_sample.jsonl").read_text().splitlines()]
    for p, row in zip(chat, rows):
        (user,) = [m["content"] for m in row["prompt"] if m["role"] == "user"]
        assert p.prompt == user.strip() + MATH_SUFFIX
        assert p.answer == (row.get("reward_model") or {}).get("ground_truth", row.get("label"))
    processed, _ = load("dapo_math_processed_sample.jsonl")
    assert [p.answer for p in chat] == [p.answer for p in processed[: len(chat)]]  # the same first problems
    assert chat[0].prompt.endswith(MATH_SUFFIX) and processed[0].uid.startswith("dapo_math/train/9a9b6eb4")


def test_minerva_qwen_copy_needs_one_setting_named_by_its_skip_message():
    problems, report = load_benchmark("minerva", data_files=str(REALDATA / "minerva_qwen_eval.jsonl"))
    assert not problems and report.n_skipped == 272
    assert "solution_key=solution" in report.summary()
    qwen, report = load_benchmark("minerva", data_files=str(REALDATA / "minerva_qwen_eval.jsonl"),
                                  solution_key="solution")
    limo, _ = load("minerva.jsonl")
    assert report.kept == 272 and [p.answer for p in qwen] == [p.answer for p in limo]


def test_list_golds_follow_is_multiple_answer(tmp_path):
    """OlympiadBench's final_answer is a list; its is_multiple_answer says parts (true) or alternatives (false).
    (The real copy holds one-element lists only: these rows use its schema.)"""
    rows = [
        {"id": 1, "question": "Give both roots.", "final_answer": ["3", "5"], "is_multiple_answer": True},
        {"id": 2, "question": "Give one root.", "final_answer": ["3", "5"], "is_multiple_answer": False},
        {"id": 3, "question": "Give one root.", "final_answer": ["$3$", "$5$"]},
    ]
    path = tmp_path / "ob.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    problems, _ = load_benchmark("olympiadbench", data_files=str(path))
    assert [p.answer for p in problems] == ["3, 5", f"3{ALT_SEP}5", "3, 5"]
    r = MathVerifyReward(fast_path=False)
    answers = ["3, 5", "3", "5", "4"]
    assert r.score([f"\\boxed{{{a}}}" for a in answers], [problems[0].answer] * 4, [True] * 4).correct.tolist() == [
        True, False, False, False]
    assert r.score([f"\\boxed{{{a}}}" for a in answers], [problems[1].answer] * 4, [True] * 4).correct.tolist() == [
        False, True, True, False]
    forced, _ = load_benchmark("olympiadbench", data_files=str(path), list_answers="any")
    assert [p.answer for p in forced] == [f"3{ALT_SEP}5"] * 3


def test_gpqa_keeps_rows_whose_correct_option_is_unique():
    """GPQA-Diamond repeats an incorrect option in 2 rows: their correct letter is still unique, so they stay."""
    problems, report = load_benchmark("gpqa_diamond", data_files=str(FIXTURES / "gpqa_diamond.csv"))
    assert report.rows_read == 4 and report.kept == 3
    assert dict(report.skipped) == {"correct GPQA option repeated among the incorrect ones": 1}
    repeated = problems[1]
    assert repeated.uid == "gpqa_diamond/train/recT002" and repeated.prompt.count("Chlorine") == 2
    assert f"{repeated.answer}: Argon" in repeated.prompt


def _former_last_boxed(text: str) -> str | None:
    """The loader's own extractor until #29, kept as the reference: the last ``\\boxed{`` whose braces balance,
    counting every brace (escaped ones too)."""
    start = text.rfind(BOXED)
    while start != -1:
        depth, i = 1, start + len(BOXED)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(BOXED) : i - 1]
        start = text.rfind(BOXED, 0, start)
    return None


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for v in items for s in _strings(v)]


def test_the_loader_reads_every_real_box_as_its_former_extractor_did():
    """The loader reads a gold's box with the reward's extractor (gdro.grading.answers.last_boxed) since #29. On every string
    of every real file that holds a box (answers, and the solutions ``solution_key`` reads), both read the same, so
    no loaded gold changed (tests/test_benchmarks.py shows where the two differ: escaped braces)."""
    boxes = 0
    for path in sorted(REALDATA.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for text in _strings(json.loads(line)) if line.strip() else []:
                if BOXED in text:
                    boxes += 1
                    assert last_boxed(text) == _former_last_boxed(text), (path.name, text[-300:])
    assert boxes > 900


def _rescore(args: list[str], capsys) -> subprocess.CompletedProcess:
    """gdro-rescore's own ``main`` in this process (its exit status, stdout and stderr); tests/test_rescore_cli.py runs
    the command itself."""
    from gdro.cli.rescore import main

    try:
        code = main(args)
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def test_rescoring_stored_completions(tmp_path, capsys):
    """gdro-rescore scores a JSON-lines file of stored completions against a benchmark without a model."""
    problems, _ = load("minerva.jsonl")
    rows = [
        {"uid": problems[0].uid, "completions": [f"\\boxed{{{problems[0].answer}}}", "\\boxed{0}"],
         "correct": [True, True]},
        {"index": 1, "completion": f"\\boxed{{{problems[1].answer}}} and then a long check" + "." * 400,
         "score": 1.0},
        {"question": problems[2].prompt.removesuffix(MATH_SUFFIX), "response": "no box", "reward": -1.0},
        {"uid": "minerva/test/#99999", "completion": "\\boxed{1}"},
    ]
    comp = tmp_path / "gens.jsonl"
    comp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "verdicts.jsonl"
    proc = _rescore([str(comp), "--benchmark", f"minerva={REALDATA / 'minerva.jsonl'}", "--out", str(out)], capsys)
    assert proc.returncode == 0, proc.stderr
    assert "| minerva | 3 | 4 | 50.00 | 66.67 | 3 / 1 |" in proc.stdout
    assert "no known problem: 1" in proc.stdout
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [g["correct"] for g in got] == [True, False, True, False]
    assert [g.get("stored") for g in got] == [True, True, True, False]
    train = _rescore([str(comp), "--benchmark", f"minerva={REALDATA / 'minerva.jsonl'}", "--window", "train"], capsys)
    assert "| minerva | 3 | 4 | 16.67 | 33.33 | 2 / 2 |" in train.stdout  # the box 400 characters back is dropped
    bad = _rescore([str(tmp_path / "nope.jsonl"), "--benchmark", "minerva"], capsys)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nope.jsonl: no such file" in bad.stderr
