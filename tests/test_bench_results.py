"""bench/RESULTS.md names paths relative to the repository, and the benches' one writer keeps it so."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from common.results import relative, write_section  # noqa: E402


def test_results_name_no_absolute_path_of_this_machine():
    text = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    # Paths in or beside the checkout (its own files, ../shared, other checkouts) are written relative to it.
    found = re.findall(rf"(?<![\w.]){re.escape(str(ROOT.parent))}/[^\s`|)]*", text)
    assert found == [], found[:5]


def test_a_section_written_with_absolute_paths_is_written_relative(tmp_path):
    results = tmp_path / "RESULTS.md"
    section = (f"<!-- x:start -->\nreport at `{ROOT}/bench/out/x/report.html`, data in `{ROOT.parent}/shared/data` "
               "<!-- x:end -->")
    write_section("x", section, results)
    text = results.read_text()
    assert "`bench/out/x/report.html`" in text and "`../shared/data`" in text and str(ROOT) not in text
    assert relative(f"{ROOT}/docs") == "docs"
