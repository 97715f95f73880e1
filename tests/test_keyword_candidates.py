"""The BM25 leg's candidates when even the query's rarest word is in more chunks than keyword_budget: the
chunks holding the rarest words together, not every chunk with the rarest one (issue 21: the leg at 1M)."""

from __future__ import annotations

import json


def test_common_words_take_the_chunks_that_hold_them_together(cli, tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(6):  # "harbour" in pages 0-4, "lantern" in pages 1-5: both only in pages 1-4
        words = (["harbour"] if i < 5 else []) + (["lantern"] if i > 0 else [])
        (folder / f"page-{i}.md").write_text(f"# Page {i}\n\nA note about {' and '.join(words)} number {i}.\n")
    cli("ingest", str(folder))

    def pages(budget: str) -> list[str]:
        cli.env["RAGVPS_KEYWORD_BUDGET"] = budget
        hits = json.loads(cli("query", "harbour lantern", "--mode", "keyword", "--json", "--k", "10").stdout)
        return sorted(h["path"] for h in hits)

    everything = [f"page-{i}.md" for i in range(6)]
    assert pages("300") == everything  # within the budget: the rarest words' chunks, OR-ed
    assert pages("1") == [f"page-{i}.md" for i in range(1, 5)]  # beyond it: the chunks with both words
