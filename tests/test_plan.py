"""`ragvps plan`: the published figures exactly, the window model's properties, and the command itself."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragvps import plan
from ragvps.errors import UsageError
from ragvps.plan import Budget, DocumentMeasure, Measurement, WindowPlan


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
    [(384, 1544, 776, 147, 74), (768, 3080, 1544, 294, 147), (1024, 4104, 2056, 391, 196),
     (1536, 6152, 3080, 587, 294)],
)
def test_pgvector_sizes(dims: int, vector: int, halfvec: int, mib_vector: int, mib_halfvec: int) -> None:
    assert plan.pgvector_bytes(dims) == plan.pgvector_bytes(dims, "vector") == vector
    assert plan.pgvector_bytes(dims, "halfvec") == halfvec
    model = plan.ModelSize("m", dims)
    assert round(model.mib_for(100_000, "vector")) == mib_vector
    assert round(model.mib_for(100_000, "halfvec")) == mib_halfvec


TOTALS = {"embedding": 200_000, "generation_input": 33_000_000, "generation_output": 4_000_000}


def test_budget_figures() -> None:
    b = Budget(corpus_chunks=100_000, tokens_per_chunk=400, questions=10_000, question_tokens=20,
               chunks_per_answer=8, prompt_tokens=100, answer_tokens=400)
    assert b.corpus_embed_tokens == 40_000_000
    assert b.generation_input_per_question == 3300
    assert b.totals() == TOTALS
    assert b.amortised() == 4000
    assert b.amortised(100_000) == 400
    assert [plan.millions(n) for n in (40_000_000, 200_000, 33_000_000, 4_000_000)] == [
        "40 M", "0.2 M", "33 M", "4 M"]


def test_common_models_match_the_models_ragvps_knows() -> None:
    from ragvps.models import KNOWN_MODELS

    dims = dict(plan.COMMON_MODELS)
    assert [m.dims for m in plan.common_models()] == [384, 768, 1024, 1536]
    for name in ("all-minilm", "nomic-embed-text", "mxbai-embed-large"):
        assert dims[name] == KNOWN_MODELS[name].dims


# --- the other arithmetic ----------------------------------------------------------------------------


def test_raw_vector_bytes_by_type() -> None:
    assert [plan.raw_vector_bytes(10, 768, b) for b in (4, 2, 1)] == [30_720, 15_360, 7_680]
    with pytest.raises(UsageError, match="--bytes-per-dim 3 must be 4"):
        plan.raw_vector_bytes(10, 768, 3)
    with pytest.raises(UsageError, match="--dims 0"):
        plan.pgvector_bytes(0)


@pytest.mark.parametrize(
    ("text", "size", "tokens"),
    [("200", 800, 200), ("12%", 800, 96), ("25%", 800, 200), ("10%", 512, 51), ("12.5%", 800, 100),
     (" 0% ", 800, 0), ("50%", 512, 256), ("0.1%", 500, 1)],
)
def test_parse_overlap(text: str, size: int, tokens: int) -> None:
    assert plan.parse_overlap(text, size) == tokens


@pytest.mark.parametrize("text", ["abc", "12 %%", "100%", "-5%", ""])
def test_parse_overlap_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--overlap"):
        plan.parse_overlap(text, 800)


@pytest.mark.parametrize(("size", "overlap"), [(800, 800), (800, 900), (1, 1)])
def test_overlap_must_be_smaller_than_the_size(size: int, overlap: int) -> None:
    with pytest.raises(UsageError, match=f"--overlap {overlap} must be smaller than --chunk-size {size}"):
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
    with pytest.raises(UsageError, match="--chunk-size 512 is above what mxbai-embed-large .*chunk_size"):
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


@given(plans())
def test_plan_agrees_with_the_chunkers_fixed_windows(p: WindowPlan) -> None:
    from ragvps.chunk import fixed_windows

    assert list(p.windows()) == fixed_windows(p.tokens, p.size, p.overlap)
