"""`ragvps plan`: the published figures exactly, the window model's properties, and the command itself."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from ragvps.errors import UsageError
from ragvps.measure import planner as plan
from ragvps.measure.planner import Budget, DocumentMeasure, Measurement, WindowPlan


def run(*args: str) -> Result:
    from ragvps.cli import app

    return CliRunner().invoke(app, ["plan", *args], catch_exceptions=False)


def flat(text: str) -> str:
    """Rich wraps long lines at the runner's 80 columns; compare words, not line breaks."""
    return " ".join(text.split())


# --- the figures from the guides, exactly ---------------------------------------------------------


def test_2500_tokens_size_800_overlap_200() -> None:
    p = WindowPlan(2500, 800, 200)
    assert p.step == 600
    assert p.chunks == 4
    assert list(p.windows()) == [(0, 800), (600, 1400), (1200, 2000), (1800, 2500)]
    assert p.lengths() == [800, 800, 800, 700]
    assert p.processed_tokens == 3100
    assert p.repeated_tokens == 600
    assert plan.raw_vector_bytes(p.chunks, 384, 4) == 6144
    assert plan.human_bytes(6144) == "6,144 bytes (6 KiB)"


def test_2500_tokens_size_800_without_overlap() -> None:
    p = WindowPlan(2500, 800, 0)
    assert (p.chunks, p.processed_tokens, p.repeated_tokens) == (4, 2500, 0)
    assert p.lengths() == [800, 800, 800, 100]


@pytest.mark.parametrize(
    ("overlap", "step", "chunks", "pct", "processed", "guide_full_length"),
    [
        (64, 448, 447, 14, 228_544, 228_864),
        (128, 384, 521, 33, 266_560, 266_752),
        (256, 256, 781, 100, 399_680, 399_872),
    ],
)
def test_200k_tokens_size_512(
    overlap: int, step: int, chunks: int, pct: int, processed: int, guide_full_length: int
) -> None:
    p = WindowPlan(200_000, 512, overlap)
    assert (p.step, p.chunks, p.processed_tokens) == (step, chunks, processed)
    assert p.repeated_tokens == processed - 200_000
    assert round(p.overhead_pct) == pct
    # the guide's figure counts every chunk at full length; the plan shows the exact sum
    assert p.chunks * p.size == guide_full_length != p.processed_tokens


@pytest.mark.parametrize(
    ("dims", "vector", "halfvec", "mib_vector", "mib_halfvec"),
    [
        (384, 1544, 776, 147, 74),
        (768, 3080, 1544, 294, 147),
        (1024, 4104, 2056, 391, 196),
        (1536, 6152, 3080, 587, 294),
    ],
)
def test_pgvector_sizes(dims: int, vector: int, halfvec: int, mib_vector: int, mib_halfvec: int) -> None:
    assert plan.pgvector_bytes(dims) == plan.pgvector_bytes(dims, "vector") == vector
    assert plan.pgvector_bytes(dims, "halfvec") == halfvec
    model = plan.ModelSize("m", dims)
    assert round(model.mib_for(100_000, "vector")) == mib_vector
    assert round(model.mib_for(100_000, "halfvec")) == mib_halfvec


TOTALS = {"embedding": 200_000, "generation_input": 33_000_000, "generation_output": 4_000_000}


def test_budget_figures() -> None:
    b = Budget(
        corpus_chunks=100_000,
        tokens_per_chunk=400,
        questions=10_000,
        question_tokens=20,
        chunks_per_answer=8,
        prompt_tokens=100,
        answer_tokens=400,
    )
    assert b.corpus_embed_tokens == 40_000_000
    assert b.generation_input_per_question == 3300
    assert b.totals() == TOTALS
    assert b.amortised() == 4000
    assert b.amortised(100_000) == 400
    assert [plan.millions(n) for n in (40_000_000, 200_000, 33_000_000, 4_000_000)] == ["40 M", "0.2 M", "33 M", "4 M"]


def test_common_models_match_the_models_ragvps_knows() -> None:
    from ragvps.embed.models import KNOWN_MODELS

    dims = dict(plan.COMMON_MODELS)
    assert [m.dims for m in plan.common_models()] == [384, 768, 1024, 1536]
    for name in ("all-minilm", "nomic-embed-text", "mxbai-embed-large"):
        assert dims[name] == KNOWN_MODELS[name].dims


# --- the other arithmetic ----------------------------------------------------------------------------


def test_raw_vector_bytes_by_type() -> None:
    assert [plan.raw_vector_bytes(10, 768, b) for b in (4, 2, 1)] == [30_720, 15_360, 7_680]
    with pytest.raises(UsageError, match="bytes_per_dim 3 must be 4"):
        plan.raw_vector_bytes(10, 768, 3)
    with pytest.raises(UsageError, match="dims 0"):
        plan.pgvector_bytes(0)


@pytest.mark.parametrize(
    ("text", "size", "tokens"),
    [
        ("200", 800, 200),
        ("12%", 800, 96),
        ("25%", 800, 200),
        ("10%", 512, 51),
        ("12.5%", 800, 100),
        (" 0% ", 800, 0),
        ("50%", 512, 256),
        ("0.1%", 500, 1),
    ],
)
def test_parse_overlap(text: str, size: int, tokens: int) -> None:
    assert plan.parse_overlap(text, size) == tokens


@pytest.mark.parametrize("text", ["abc", "12 %%", "100%", "-5%", ""])
def test_parse_overlap_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="overlap"):
        plan.parse_overlap(text, 800)


@pytest.mark.parametrize(("size", "overlap"), [(800, 800), (800, 900), (1, 1)])
def test_overlap_must_be_smaller_than_the_size(size: int, overlap: int) -> None:
    with pytest.raises(UsageError, match=f"overlap {overlap} must be smaller than chunk_size {size}"):
        WindowPlan(100, size, overlap)


@pytest.mark.parametrize(("tokens", "size", "overlap"), [(-1, 10, 0), (10, 0, 0), (10, 10, -1)])
def test_nonsense_inputs_are_refused(tokens: int, size: int, overlap: int) -> None:
    with pytest.raises(UsageError):
        WindowPlan(tokens, size, overlap)


def test_overlap_above_a_third_needs_a_reason() -> None:
    assert WindowPlan(1000, 900, 300).warnings() == []  # exactly a third
    (warning,) = WindowPlan(1000, 900, 301).warnings()
    assert "above a third of the chunk size 900" in warning and "needs a reason" in warning


def test_small_and_empty_streams() -> None:
    empty = WindowPlan(0, 512, 64)
    assert (empty.chunks, empty.processed_tokens, empty.overhead_pct) == (0, 0, 0.0)
    assert list(empty.windows()) == []
    short = WindowPlan(100, 512, 64)
    assert (short.chunks, short.lengths(), short.repeated_tokens) == (1, [100], 0)
    exact = WindowPlan(512, 512, 64)
    assert (exact.chunks, exact.lengths()) == (1, [512])


def test_long_plans_list_first_and_last_lengths() -> None:
    assert WindowPlan(200_000, 512, 64).lengths() == {"first": [512, 512, 512], "last": [512, 512, 192]}


def test_input_limit() -> None:
    plan.check_input_limit(510, 510, "mxbai-embed-large")
    with pytest.raises(UsageError, match="chunk_size 512 is above what mxbai-embed-large .*chunk_size"):
        plan.check_input_limit(512, 510, "mxbai-embed-large")


def test_compare_overlaps_resolves_percentages_and_drops_repeats() -> None:
    plans = plan.compare_overlaps(200_000, 512, [*plan.COMPARE_OVERLAPS, "128"])
    assert [(p.overlap, p.chunks) for p in plans] == [(0, 391), (51, 434), (128, 521), (256, 781)]


def test_strip_diagram() -> None:
    lines = plan.strip(WindowPlan(2500, 800, 200)).splitlines()
    assert lines[0].startswith("first 4 of 4 windows")
    rows = lines[1:]
    assert [row.split()[0] for row in rows] == ["#1", "#2", "#3", "#4"]
    assert rows[0].split()[1] == "0-800" and rows[3].split()[1] == "1,800-2,500"
    assert all("x" in row.split()[2] for row in rows)
    bars = [row.split()[2] for row in rows]
    assert bars[0].endswith("x") and not bars[0].startswith("x")  # first shares only its end
    assert bars[3].startswith("x") and not bars[3].endswith("x")  # last shares only its start
    starts = [row.index(bar) for row, bar in zip(rows, bars, strict=True)]
    assert starts == sorted(starts)  # windows move right

    plain = plan.strip(WindowPlan(2500, 800, 0), rows=2).splitlines()
    assert len(plain) == 3 and "first 2 of 4 windows" in plain[0]
    assert all(set(row.split()[2]) == {"="} for row in plain[1:])
    assert plan.strip(WindowPlan(0, 800, 0)) == "(no tokens, no windows)"


def test_measurement_shows_what_document_boundaries_do() -> None:
    docs = tuple(DocumentMeasure(f"d{i}", WindowPlan(110, 100, 20), 2, 230) for i in range(2))
    m = Measurement(100, 20, docs)
    assert m.tokens == 220
    assert (m.stream.chunks, m.stream.processed_tokens) == (3, 260)  # one stream of 220 tokens
    assert (m.window_chunks, m.window_processed) == (4, 260)  # each document cut on its own
    assert m.as_dict()["chunks_vs_stream"] == 1


# --- properties of the window model ------------------------------------------------------------------

sizes = st.integers(min_value=1, max_value=600)


@st.composite
def plans(draw: st.DrawFn) -> WindowPlan:
    size = draw(sizes)
    return WindowPlan(draw(st.integers(0, 5000)), size, draw(st.integers(0, size - 1)))


def reference_windows(n: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """The issue's definition, step by step: start at 0, step, 2*step, ... until the stream is covered."""
    out: list[tuple[int, int]] = []
    start = 0
    while n and (not out or out[-1][1] < n):
        out.append((start, min(start + size, n)))
        start += size - overlap
    return out


@given(plans())
def test_closed_form_matches_the_definition(p: WindowPlan) -> None:
    ref = reference_windows(p.tokens, p.size, p.overlap)
    assert list(p.windows()) == ref
    assert p.chunks == len(ref)
    assert p.processed_tokens == sum(b - a for a, b in ref)


@given(plans())
def test_chunk_count_formula(p: WindowPlan) -> None:
    expected = 0 if p.tokens == 0 else max(1, math.ceil((p.tokens - p.overlap) / p.step))
    assert p.chunks == expected


@given(plans())
def test_windows_cover_the_stream_contiguously(p: WindowPlan) -> None:
    wins = list(p.windows())
    if p.tokens == 0:
        assert wins == []
        return
    assert wins[0][0] == 0 and wins[-1][1] == p.tokens
    for (a, b), (c, d) in zip(wins, wins[1:], strict=False):
        assert c == a + p.step  # evenly spaced
        assert b - c == p.overlap  # neighbours share exactly the overlap: no gap
        assert d > b  # every window reaches further
    if len(wins) > 1:
        assert wins[-2][1] < p.tokens  # no window more than needed


@given(plans())
def test_last_window_length(p: WindowPlan) -> None:
    lengths = [b - a for a, b in p.windows()]
    if not lengths:
        return
    assert all(n == p.size for n in lengths[:-1])
    assert 1 <= lengths[-1] == p.last_length <= p.size
    assert p.last_length == p.tokens - (p.chunks - 1) * p.step


@given(plans())
def test_processed_is_stream_plus_repeated(p: WindowPlan) -> None:
    assert p.processed_tokens == p.tokens + p.repeated_tokens
    assert p.repeated_tokens >= 0
    assert p.repeated_tokens <= max(0, p.chunks - 1) * p.overlap
    if p.overlap == 0:
        assert p.repeated_tokens == 0


@settings(max_examples=40, deadline=None)
@given(plans())
def test_plan_agrees_with_the_chunker(p: WindowPlan) -> None:
    """The fixed-mode chunker over a document of p.tokens one-token words cuts the plan's windows."""
    from ragvps.ingest.chunk import ChunkerConfig, chunk_document
    from ragvps.records import Document

    doc = Document("d", "d", "", " ".join(["word"] * p.tokens), "text")
    chunks = chunk_document(doc, ChunkerConfig("fixed", p.size, p.overlap, 4096))
    assert [(c.start, c.tokens) for c in chunks] == [(5 * a, b - a) for a, b in p.windows()]


# --- the command --------------------------------------------------------------------------------------


def test_cli_json_2500() -> None:
    result = run("--tokens", "2500", "--chunk-size", "800", "--overlap", "200", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["step"] == 600
    assert out["chunks"] == 4
    assert out["chunk_lengths"] == [800, 800, 800, 700]
    assert (out["processed_tokens"], out["repeated_tokens"], out["overhead_pct"]) == (3100, 600, 24.0)
    assert out["raw_vector_bytes"] == 8192  # the default model's 512 dimensions
    assert out["pgvector_bytes_per_vector"] == {"vector": 2056, "halfvec": 1032}
    assert out["pgvector_column_bytes"] == {"vector": 4 * 2056, "halfvec": 4 * 1032}
    assert out["warnings"] == []
    assert "excludes the chunk text" in out["note"]


@pytest.mark.parametrize(
    ("overlap", "chunks", "processed", "pct"),
    [("64", 447, 228_544, 14.27), ("128", 521, 266_560, 33.28), ("256", 781, 399_680, 99.84)],
)
def test_cli_json_200k(overlap: str, chunks: int, processed: int, pct: float) -> None:
    out = json.loads(run("--tokens", "200000", "--chunk-size", "512", "--overlap", overlap, "--json").stdout)
    assert (out["chunks"], out["processed_tokens"], out["overhead_pct"]) == (chunks, processed, pct)
    assert out["chunk_lengths"]["first"] == [512, 512, 512]


def test_cli_percent_overlap() -> None:
    out = json.loads(run("--tokens", "2500", "--chunk-size", "800", "--overlap", "12%", "--json").stdout)
    assert (out["overlap"], out["step"], out["chunks"]) == (96, 704, 4)
    same = json.loads(run("--tokens", "2500", "--chunk-size", "800", "--overlap", "25%", "--json").stdout)
    assert (same["overlap"], same["processed_tokens"]) == (200, 3100)


def test_cli_human_output() -> None:
    result = run("--tokens", "2500", "--chunk-size", "800", "--overlap", "200")
    assert result.exit_code == 0
    out = result.stdout
    assert "step 600" in out
    assert "4 (800, 800, 800, 700)" in out
    assert "processed tokens  3,100" in out and "repeated tokens   600" in out
    assert "8,192 bytes (8 KiB) = 4 vectors x 512 dims x 4 bytes" in out
    assert "2,056 bytes per vector" in out and "1,032 bytes per vector" in out
    assert "#4 1,800-2,500" in out  # the strip diagram
    assert "equal size does not mean equal retrieval quality" in out


@pytest.mark.parametrize("overlap", ["800", "1000", "100%"])
def test_cli_overlap_not_below_the_size_is_an_error(overlap: str) -> None:
    result = run("--tokens", "2500", "--chunk-size", "800", "--overlap", overlap)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "--overlap" in flat(result.stderr) and "error:" in result.stderr


def test_cli_overlap_error_message() -> None:
    result = run("--tokens", "2500", "--chunk-size", "800", "--overlap", "800")
    assert "error: --overlap 800 must be smaller than --chunk-size 800" in flat(result.stderr)


def test_cli_warns_above_a_third() -> None:
    result = run("--tokens", "2500", "--chunk-size", "800", "--overlap", "300", "--json")
    assert result.exit_code == 0
    warning = "warning: overlap 300 is above a third of the chunk size 800: that needs a reason"
    assert warning in flat(result.stderr)
    assert len(json.loads(result.stdout)["warnings"]) == 1
    quiet = run("--tokens", "2500", "--chunk-size", "800", "--overlap", "200")
    assert "warning" not in quiet.stderr


def test_cli_compare_json() -> None:
    result = run("--tokens", "200000", "--chunk-size", "512", "--compare", "--json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    rows = [(o["overlap"], o["step"], o["chunks"], o["processed_tokens"]) for o in out["overlaps"]]
    assert rows == [(0, 512, 391, 200_000), (51, 461, 434, 222_083), (128, 384, 521, 266_560), (256, 256, 781, 399_680)]
    models = {
        m["dims"]: (
            m["vector_bytes_per_vector"],
            round(m["vector_mib_per_100k"]),
            m["halfvec_bytes_per_vector"],
            round(m["halfvec_mib_per_100k"]),
        )
        for m in out["models"]
    }
    assert models == {
        384: (1544, 147, 776, 74),
        768: (3080, 294, 1544, 147),
        1024: (4104, 391, 2056, 196),
        1536: (6152, 587, 3080, 294),
    }
    assert "above a third" not in flat(result.stderr)  # the 50% row is the comparison's own, not the user's
    mine = run("--tokens", "200000", "--chunk-size", "512", "--overlap", "50%", "--compare")
    assert mine.exit_code == 0 and "overlap 256 is above a third" in flat(mine.stderr)


def test_cli_compare_alone_compares_an_example_corpus_and_says_so() -> None:
    result = run("--compare", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["overlaps"][0]["tokens"] == 1_000_000 and out["overlaps"][0]["chunk_size"] == 512
    assert "comparing for 1,000,000 tokens in chunks of 512" in flat(result.stderr)
    assert "warning: overlap" not in result.stderr


def test_cli_compare_table() -> None:
    result = run("--tokens", "200000", "--chunk-size", "512", "--overlap", "64", "--compare")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()

    def row(start: str) -> list[str]:
        (line,) = [x for x in lines if x.strip("│┃ ").startswith(start)]
        return [cell.strip() for cell in line.strip("│").split("│")]

    assert row("0 (0%)")[1:6] == ["512", "391", "200,000", "0", "+0%"]
    assert row("64 (12%)")[1:6] == ["448", "447", "228,544", "28,544", "+14%"]
    assert row("128 (25%)")[2] == "521" and row("256 (50%)")[5] == "+100%"
    assert row("all-minilm")[1:] == ["384", "1,544", "776", "147", "74"]
    assert row("nomic-embed-text")[1:] == ["768", "3,080", "1,544", "294", "147"]
    assert row("mxbai-embed-large")[1:] == ["1024", "4,104", "2,056", "391", "196"]
    assert row("hosted")[1:] == ["1536", "6,152", "3,080", "587", "294"]


BUDGET = (
    "--budget",
    "--corpus-chunks",
    "100000",
    "--tokens-per-chunk",
    "400",
    "--questions",
    "10000",
    "--question-tokens",
    "20",
    "--chunks-per-answer",
    "8",
    "--prompt-tokens",
    "100",
    "--answer-tokens",
    "400",
)


def test_cli_budget() -> None:
    result = run(*BUDGET)
    assert result.exit_code == 0
    out = flat(result.stdout)
    assert "100,000 chunks x 400 tokens = 40,000,000 (40 M) tokens" in out
    assert "embedding 20; generation input 3,300 (8 chunks x 400 + 100); generation output 400" in out
    assert (
        "for 10,000 questions: embedding 200,000 (0.2 M); generation input 33,000,000 (33 M); "
        "generation output 4,000,000 (4 M)"
    ) in out
    assert "4,000 tokens per question at 10,000 questions, 400 at 100,000" in out


def test_cli_budget_json_and_defaults() -> None:
    out = json.loads(run(*BUDGET[:7], "--json").stdout)  # the guide's numbers are also the defaults
    assert out["corpus_embed_tokens"] == 40_000_000
    assert out["per_question"] == {"embedding": 20, "generation_input": 3300, "generation_output": 400}
    assert out["totals"] == TOTALS
    assert out["amortised_embedding_per_question"] == {"10000": 4000, "100000": 400}


def test_cli_budget_needs_its_inputs() -> None:
    result = run("--budget", "--corpus-chunks", "100")
    assert result.exit_code == 2
    assert "--budget needs --tokens-per-chunk, --questions" in flat(result.stderr)
    zero = run("--budget", "--corpus-chunks", "100", "--tokens-per-chunk", "4", "--questions", "0")
    assert zero.exit_code == 2 and "--questions 0 must be at least 1" in flat(zero.stderr)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "needs --tokens N and --chunk-size S"),
        (("--tokens", "10"), "needs --tokens N and --chunk-size S"),
        (("--compare", "--budget"), "--compare and --budget are separate modes"),
        (("--tokens", "10", "--chunk-size", "8", "--bytes-per-dim", "3"), "--bytes-per-dim 3 must be 4"),
        (("--tokens", "10", "--chunk-size", "8", "--model", "nope"), "--model 'nope' is not a model"),
        (
            ("--tokens", "10", "--chunk-size", "8", "--model", "nomic-embed-text", "--dims", "384"),
            "--dims 384 contradicts --model nomic-embed-text, which has 768 dimensions",
        ),
    ],
)
def test_cli_usage_errors(args: tuple[str, ...], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert message in flat(result.stderr)


def test_cli_model_takes_dims_and_input_limit() -> None:
    args = ("--tokens", "2500", "--chunk-size", "800", "--model", "nomic-embed-text", "--json")
    out = json.loads(run(*args).stdout)
    assert (out["dims"], out["raw_vector_bytes"]) == (768, 12_288)
    assert out["pgvector_bytes_per_vector"]["vector"] == 3080
    result = run("--tokens", "2500", "--chunk-size", "512", "--model", "mxbai-embed-large")
    assert result.exit_code == 2
    message = flat(result.stderr)
    assert "--chunk-size 512 is above what mxbai-embed-large reads (510 tokens" in message
    assert "(setting chunk_size)" in message
    assert run("--tokens", "2500", "--chunk-size", "510", "--model", "mxbai-embed-large").exit_code == 0


# --- measuring a folder ---------------------------------------------------------------------------------

GUIDE = """# Backups

Take a base backup every night with pg_basebackup and keep the write-ahead log in between, so any
moment of the last week can be restored. Test the restore monthly on a spare machine.

## Retention

Keep seven nightly backups and four weekly ones. Delete older ones with a cron job that checks the
backup finished before it removes anything.
"""
NOTES = "Ollama listens on port 11434. " * 40


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of real small documents, and a working directory and environment with no ragvps settings."""
    for key in [k for k in os.environ if k.startswith("RAGVPS_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "guide.md").write_text(GUIDE, encoding="utf-8")
    (docs / "notes.txt").write_text(NOTES, encoding="utf-8")
    (docs / "image.gif").write_bytes(b"GIF89a")
    return docs


def test_cli_measures_a_folder(corpus: Path) -> None:
    from ragvps import tokens
    from ragvps.config import load_settings
    from ragvps.embed.models import spec_for
    from ragvps.ingest import sources
    from ragvps.ingest.chunk import chunk_document
    from ragvps.ingest.chunking import chunker_config

    result = run("--path", str(corpus), "--chunk-size", "40", "--overlap", "25%", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)

    settings = load_settings(chunk_size=40, chunk_overlap=10)
    spec = spec_for(settings)
    config = chunker_config(settings, spec)
    docs = [d for f in sources.scan(corpus).files for d in sources.load(f, print)]
    counts = {d.doc_id: tokens.count(d.text) for d in docs}
    chunks = {d.doc_id: chunk_document(d, config) for d in docs}

    assert (out["documents"], out["chunk_size"], out["overlap"], out["model"]) == (2, 40, 10, spec.name)
    assert out["tokens"] == sum(counts.values()) > 300
    stream = WindowPlan(out["tokens"], 40, 10)
    assert out["stream"] == {"chunks": stream.chunks, "processed_tokens": stream.processed_tokens}
    per_doc = [WindowPlan(n, 40, 10) for n in counts.values()]
    assert out["per_document_windows"]["chunks"] == sum(p.chunks for p in per_doc)
    assert out["chunker"]["chunks"] == sum(len(c) for c in chunks.values())
    assert out["chunker"]["chunk_tokens"] == sum(c.tokens for cs in chunks.values() for c in cs)
    assert out["chunks_vs_stream"] == out["chunker"]["chunks"] - stream.chunks
    assert {d["doc_id"]: d["tokens"] for d in out["per_document"]} == counts
    assert out["raw_vector_bytes"] == out["chunker"]["chunks"] * spec.dims * 4


def test_cli_measure_table(corpus: Path) -> None:
    result = run("--path", str(corpus), "--chunk-size", "40", "--overlap", "10")
    assert result.exit_code == 0, result.output
    out = flat(result.stdout)
    assert "2 documents" in out and "chunk size 40, overlap 10" in out
    labels = ("one continuous stream (estimate)", "fixed windows per document", "the chunker, per document")
    for label in labels:
        assert label in out
    assert "document boundaries change the count by" in out


def test_cli_measure_errors(corpus: Path, tmp_path: Path) -> None:
    above = run("--path", str(corpus), "--chunk-size", "600")  # the default model reads 510 text tokens
    assert above.exit_code == 2 and "--chunk-size 600 is above what" in flat(above.stderr)
    missing = run("--path", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2 and "does not exist" in flat(missing.stderr)
    (tmp_path / "empty").mkdir()
    empty = run("--path", str(tmp_path / "empty"))
    assert empty.exit_code == 1 and "has no documents ragvps can read" in flat(empty.stderr)  # one rule: not found
    counted = run("--path", str(corpus), "--tokens", "100")
    assert counted.exit_code == 2 and "leave out --tokens" in flat(counted.stderr)
    both = run("--path", str(corpus), "--compare")
    assert both.exit_code == 2 and "separate modes" in flat(both.stderr)
