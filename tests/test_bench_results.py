"""bench/RESULTS.md names paths relative to the repository, and the benches' one writer keeps it so."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from common.results import PREVIOUS, markers, relative, write_section  # noqa: E402


def test_results_name_no_absolute_path_of_this_machine():
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    # Paths in or beside the checkout (its own files, ../shared, other checkouts) are written relative to it.
    found = re.findall(rf"(?<![\w.]){re.escape(str(ROOT.parent))}/[^\s`|)]*", text)
    assert found == [], found[:5]


def test_a_section_written_with_absolute_paths_is_written_relative(tmp_path):
    results = tmp_path / "RESULTS.md"
    section = (
        f"<!-- x:start -->\nreport at `{ROOT}/bench/out/x/report.html`, data in `{ROOT.parent}/shared/data` "
        "<!-- x:end -->"
    )
    write_section("x", section, results)
    text = results.read_text()
    assert "`bench/out/x/report.html`" in text and "`../shared/data`" in text and str(ROOT) not in text
    assert relative(f"{ROOT}/docs") == "docs"


def test_a_new_run_keeps_the_one_it_replaces_beneath_it_and_no_older(tmp_path):
    results = tmp_path / "RESULTS.md"
    for run in ("first", "second", "third"):
        write_section("x", f"<!-- x:start -->\n## x\n\n{run} run: 1.0 req/s\n<!-- x:end -->", results)
    text = results.read_text()
    assert text.count("<!-- x:start -->") == 1 and text.count(PREVIOUS) == 1
    latest, previous = text.split(PREVIOUS)
    assert "third run" in latest and "second run" in previous and "first run" not in text
    assert previous.count("## x") == 0 and text.count("<!-- x:end -->") == 1


def test_results_hold_one_section_per_benchmark_each_listed_in_the_index():
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    names = re.findall(r"<!-- (.+?):start -->", text)
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    index = text[: text.index("<!--")]
    for name in names:
        start, end = markers(name)
        assert f"| {name} |" in index, f"{name} is not in the index at the top of bench/RESULTS.md"
        assert text[text.index(start) : text.index(end)].count(PREVIOUS) <= 1, f"{name} keeps more than one run"
