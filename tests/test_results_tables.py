"""docs/results.md's generated tables against the committed run summaries (scripts/rebuild_results.py): every number
of a ``<!-- table: NAME -->`` block must be what the command computes from experiments/results/; a changed number
in the docs fails."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "rebuild_results.py"
DOCS = REPO / "docs" / "results.md"


def _check(docs: Path, *tables: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--check", "--docs", str(docs), *tables], capture_output=True,
                          text=True, check=False, cwd=REPO)


def test_every_generated_table_agrees_with_its_summaries():
    text = DOCS.read_text(encoding="utf-8")
    names = re.findall(r"<!-- table: ([\w-]+) -->\n.*?<!-- /table: \1 -->", text, re.DOTALL)
    assert names, "docs/results.md holds no generated table"
    proc = _check(DOCS)
    assert proc.returncode == 0, proc.stderr
    assert f"{len(names)} table(s) agree with their summaries" in proc.stdout


def test_a_changed_number_in_the_docs_fails(tmp_path):
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"<!-- table: ([\w-]+) -->\n(.*?)<!-- /table: \1 -->", text, re.DOTALL)
    number = re.search(r"\d+\.\d", block[2])
    start = block.start(2) + number.start()
    changed = text[:start] + ("9" if text[start] != "9" else "8") + text[start + 1:]
    docs = tmp_path / "results.md"
    docs.write_text(changed, encoding="utf-8")
    proc = _check(docs, block[1])  # the changed table alone: every table's rebuild is the test above
    assert proc.returncode == 1
    assert f"table {block[1]!r} differs from its summaries (numbers changed)" in proc.stderr


def test_every_table_is_rebuilt_or_marked_not_recomputable():
    """Each markdown table of docs/results.md is a generated block (rebuilt from summaries), the Holm table derived
    from the printed numbers (scripts/holm_printed.py), or carries the plain "Not recomputable" line above it."""
    lines = DOCS.read_text(encoding="utf-8").splitlines()
    inside, unmarked, starts = None, [], 0
    for i, line in enumerate(lines):
        if m := re.match(r"<!-- (?:table: ([\w-]+)|holm-printed: begin) -->", line):
            inside = m[1] or "holm-printed"
        elif re.match(r"<!-- (?:/table: [\w-]+|holm-printed: end) -->", line):
            inside = None
        is_start = line.startswith("|") and not (i and lines[i - 1].startswith("|"))
        if not is_start or inside:
            continue
        starts += 1
        above = next((x for x in reversed(lines[:i]) if x.strip()), "")
        if not above.startswith("> **Not recomputable:**"):
            unmarked.append(f"line {i + 1}: {line[:60]}")
    assert starts > 10 and not unmarked, unmarked
