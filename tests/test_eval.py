"""`ragvps eval`: gold files and BEIR data scored per search mode, through the real CLI and database."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.browser import CHROMIUM, chromium

from ragvps.errors import UsageError
from ragvps.measure.evaluate import Question, load_beir, load_gold, ranked_documents, score
from ragvps.measure.report import render

DOCS = Path(__file__).resolve().parents[1] / "docs"

# Hand-written questions about the repository's own docs/ pages.
GOLD = [
    {
        "question": "How do I stop the embedded database server?",
        "doc": "embedded-database.md",
        "answer": "ragvps server stop",
    },
    {
        "question": "Which Python version does ragvps need?",
        "doc": "getting-started.md",
        "answer": "Python 3.11 or newer",
    },
    {
        "question": "What happens if an ingest is interrupted by a reboot?",
        "doc": "incremental-ingest.md",
        "answer": "run the same command again",
    },
    {
        "question": "How are the vector and full-text result lists merged into one?",
        "doc": "search.md",
        "answer": "reciprocal rank fusion",
    },
    {"question": "Which environment variable points ragvps at my own PostgreSQL server?", "doc": "configuration.md"},
    {
        "question": "Does the embedded server listen on a network port?",
        "doc": "./embedded-database.md",
        "answer": "listens on a Unix socket only",
    },
    {
        "question": "When should the nightly reindex job run?",
        "doc": "incremental-ingest.md",
        "answer": "Run it from cron or a systemd timer at night.",
    },
    {"question": "Where does ragvps keep the embedding cache?", "doc": "getting-started.md"},
    # Never a hit: the page does not exist, and the quote is not in the page.
    {"question": "How do I deploy ragvps on Kubernetes?", "doc": "deployment.md"},
    {"question": "How does search rank chunks?", "doc": "search.md", "answer": "quantum teleportation"},
]


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    target = tmp_path / "docs"
    shutil.copytree(DOCS, target)
    return target


def _write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _flat(text: str) -> str:
    return " ".join(text.split())


DEPTH = 600  # above docs/'s chunks (421 with docs/scale-out.md)


def test_gold_questions_over_the_docs(cli, docs, tmp_path):
    ingest = json.loads(cli("ingest", str(docs), "--json").stdout)
    assert ingest["chunks"] <= DEPTH  # --depth DEPTH then retrieves every chunk in vector mode
    gold = _write_jsonl(tmp_path / "gold.jsonl", GOLD)
    html = tmp_path / "report.html"
    result = cli("eval", str(gold), "--json", "--depth", str(DEPTH), "--report", str(html))
    out = json.loads(result.stdout)
    assert "1 gold documents are not ingested (e.g. 'deployment.md')" in _flat(result.stderr)
    assert out["questions"] == 10 and out["k"] == 10 and out["depth"] == DEPTH
    assert list(out["modes"]) == ["vector", "keyword", "hybrid"]

    # Vector and hybrid see every chunk: exactly the two impossible questions are missed, the rest found.
    for mode in ("vector", "hybrid"):
        m = out["modes"][mode]
        assert m["no_hit"] == 2
        assert m["recall@10"] == pytest.approx(0.8)
        assert 0.5 <= m["mrr@10"] <= 0.8 and 0.5 <= m["ndcg@10"] <= 0.8
        assert len(m["recall_curve"]) == DEPTH and m["recall_curve"][-1] == pytest.approx(0.8)
        assert m["recall_curve"] == sorted(m["recall_curve"])
    kw = out["modes"]["keyword"]
    assert kw["no_hit"] >= 2 and kw["recall@10"] <= 0.8

    per = {q["question"]: q for q in out["per_question"]}
    assert per["How do I deploy ragvps on Kubernetes?"]["first_rank"] == {
        "vector": None,
        "keyword": None,
        "hybrid": None,
    }
    assert per["How does search rank chunks?"]["ranks"]["vector"] == []
    assert per["How do I stop the embedded database server?"]["first_rank"]["hybrid"] == 1
    assert per["Does the embedded server listen on a network port?"]["relevant"] == ["embedded-database.md"]
    for q in out["per_question"]:
        for mode, ranks in q["ranks"].items():
            assert q["first_rank"][mode] == (ranks[0] if ranks else None)
    assert out["modes"]["vector"]["mrr@10"] == pytest.approx(
        sum(
            1 / q["first_rank"]["vector"]
            for q in out["per_question"]
            if q["first_rank"]["vector"] and q["first_rank"]["vector"] <= 10
        )
        / 10
    )

    page = html.read_text()
    # One chart with every mode, so they compare at a glance; seen in a real browser when chromium is here.
    modes = ("vector", "keyword", "hybrid")
    assert page.count("<svg") == 1 and all(f'<polyline data-mode="{m}"' in page for m in modes)
    _look_in_chromium(html, tmp_path)
    assert "http://" not in page and "https://" not in page and "<script" not in page and "<link" not in page
    assert "recall@10" in page and "How do I deploy ragvps on Kubernetes?" in page


def _look_in_chromium(html: Path, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        return  # the chart's own checks above hold; the look is checked where chromium is
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        page.goto(html.as_uri())
        assert page.locator("svg.curve").count() == 1
        for mode in ("vector", "keyword", "hybrid"):
            box = page.locator(f"svg.curve polyline[data-mode={mode}]").bounding_box()
            assert box is not None and box["width"] > 100, (mode, box)
        assert [t.split()[0] for t in page.locator("svg.curve text.legend").all_text_contents()] == [
            "vector",
            "keyword",
            "hybrid",
        ]
        shots = Path(__file__).resolve().parent / "output" / "screenshots"
        shots.mkdir(parents=True, exist_ok=True)
        page.locator("svg.curve").screenshot(path=str(shots / "eval-report-curves.png"))


def test_human_table_and_smaller_k(cli, docs, tmp_path):
    cli("ingest", str(docs))
    gold = _write_jsonl(tmp_path / "gold.jsonl", GOLD[:8])
    out = json.loads(cli("eval", str(gold), "--k", "1", "--modes", "vector,hybrid", "--json").stdout)
    assert list(out["modes"]) == ["vector", "hybrid"]
    for m in out["modes"].values():
        # recall@1 = MRR@1 = nDCG@1 with one relevant document per question
        assert 0.5 <= m["recall@1"] <= 1 and m["mrr@1"] == m["recall@1"] == pytest.approx(m["ndcg@1"])
        assert m["no_hit"] == 0

    human = cli("eval", str(gold)).stdout.splitlines()
    assert human[0].startswith("8 questions from ")
    assert human[1].split() == ["mode", "recall@10", "MRR@10", "nDCG@10", "no", "hit", "(top", "40)"]
    assert [line.split()[0] for line in human[2:]] == ["vector", "keyword", "hybrid"]
    assert all(0 <= float(v) <= 1 for line in human[2:] for v in line.split()[1:4])


BEIR_CORPUS = [
    {
        "_id": "d1",
        "title": "Volcanoes",
        "text": "Volcanic eruptions release ash and sulfur dioxide into the "
        "stratosphere. Large eruptions cool the climate for a year or two. Magma chambers refill slowly.",
    },
    {
        "_id": "d2",
        "title": "Honey bees",
        "text": "Honey bees communicate the direction of flowers with a waggle "
        "dance. Colonies collapse when mites and pesticides weaken the workers.",
    },
    {
        "_id": "d3",
        "title": "Pollination",
        "text": "Bees, moths and bats pollinate flowering plants. Without "
        "pollinators many crops such as almonds would fail.",
    },
    {
        "_id": "d4",
        "title": "Sourdough",
        "text": "Sourdough bread rises with wild yeast and lactic acid "
        "bacteria kept in a starter that is fed flour and water.",
    },
    {
        "_id": "d5",
        "title": "Tides",
        "text": "Ocean tides follow the moon's gravity; spring tides happen when the "
        "sun and moon align at new and full moon.",
    },
    {
        "_id": "d6",
        "title": "Glaciers",
        "text": "Glaciers carve valleys as they flow; retreating glaciers leave moraines of rock and gravel behind.",
    },
]


def _beir(tmp_path: Path) -> tuple[Path, Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _write_jsonl(corpus / "corpus.jsonl", BEIR_CORPUS)
    queries = _write_jsonl(
        tmp_path / "queries.jsonl",
        [
            {"_id": "q1", "text": "Do volcanic eruptions cool the climate?"},
            {"_id": "q2", "text": "How do bees tell each other where flowers are, and which crops need them?"},
            {"_id": "q3", "text": "How is bread leavened?"},
        ],
    )
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t1\nq3\td4\t0\nq9\td5\t1\n")
    return corpus, queries, qrels


def test_beir_queries_and_qrels(cli, tmp_path):
    corpus, queries, qrels = _beir(tmp_path)
    ingest = json.loads(cli("ingest", str(corpus), "--chunk-size", "16", "--json").stdout)
    assert ingest["documents"] == 6 and ingest["chunks"] > 12  # several chunks per document
    result = cli("eval", "--queries", str(queries), "--qrels", str(qrels), "--depth", "100", "--json")
    assert "1 query ids in" in _flat(result.stderr) and "'q9'" in result.stderr
    out = json.loads(result.stdout)
    assert out["questions"] == 2  # q3 has only a 0 judgment, q9 has no query text
    per = {q["id"]: q for q in out["per_question"]}
    assert per["q2"]["relevant"] == ["d2", "d3"]
    for mode in ("vector", "hybrid"):
        m = out["modes"][mode]
        assert m["no_hit"] == 0 and m["recall@10"] == 1.0  # all 6 documents come back within 100 chunks
        assert m["recall_curve"][5] == 1.0
        # document level: ranks count documents (6), not chunks
        assert all(1 <= r <= 6 for q in per.values() for r in q["ranks"][mode])
        assert len(per["q2"]["ranks"][mode]) == 2
    assert per["q1"]["first_rank"]["vector"] == 1

    keyword = json.loads(
        cli("eval", "--queries", str(queries), "--qrels", str(qrels), "--modes", "keyword", "--json").stdout
    )
    assert list(keyword["modes"]) == ["keyword"] and keyword["questions"] == 2
    assert keyword["modes"]["keyword"] == out["modes"]["keyword"] | {
        "recall_curve": out["modes"]["keyword"]["recall_curve"][:40]
    }  # the default depth, 40

    cli.env["RAGVPS_EMBEDDER"] = "ollama"  # another model than the index's: refused, nothing scored
    refused = cli("eval", "--queries", str(queries), "--qrels", str(qrels), expect=1)
    assert "the index holds vector(384) vectors from model all-MiniLM-L6-v2-int8" in _flat(refused.stderr)


def test_errors_name_the_file_and_line(cli, tmp_path):
    missing = cli("eval", str(tmp_path / "nope.jsonl"), expect=2)
    assert "gold file" in missing.stderr and "nope.jsonl does not exist" in _flat(missing.stderr)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(GOLD[0]) + "\n{not json\n")
    assert "bad.jsonl:2: not valid JSON" in _flat(cli("eval", str(bad), expect=2).stderr)
    bad.write_text('{"question": "where?"}\n')
    assert "bad.jsonl:1: needs a non-empty `question` and `doc`" in _flat(cli("eval", str(bad), expect=2).stderr)

    usage = cli("eval", expect=2).stderr
    assert "give a gold file" in usage
    gold = _write_jsonl(tmp_path / "gold.jsonl", GOLD[:2])
    assert "not both" in cli("eval", str(gold), "--queries", str(gold), "--qrels", str(gold), expect=2).stderr
    assert "--modes" in cli("eval", str(gold), "--modes", "semantic", expect=2).stderr
    nothing = cli("eval", str(gold), expect=2)
    assert "nothing is ingested yet" in nothing.stderr and "Traceback" not in nothing.stderr + nothing.stdout

    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1 d1\n")
    assert "qrels.tsv:2: expected `query-id corpus-id score`" in _flat(
        cli("eval", "--queries", str(gold), "--qrels", str(qrels), expect=2).stderr
    )


# The pure core: loading and scoring without a database.


@dataclass
class _Hit:
    doc_id: str
    path: str
    text: str


def test_ranked_documents_dedupe_and_quote():
    hits = [
        _Hit("b.md", "b.md", "x"),
        _Hit("a.md", "a.md", "no quote here"),
        _Hit("b.md", "b.md", "y"),
        _Hit("c.md", "c.md", "the answer   is 42 indeed"),
        _Hit("a.md", "a.md", "so: the answer is 42."),
    ]
    ranked = ranked_documents(hits, Question("1", "?", {"a.md": 1}, answer="the answer is 42"))
    assert ranked == ["b.md", "a.md (chunk without the answer)", "c.md", "a.md"]
    assert ranked_documents(hits, Question("1", "?", {"a.md": 1}))[:2] == ["b.md", "a.md"]
    beir = [_Hit("d7", "corpus.jsonl", "t"), _Hit("d3", "corpus.jsonl", "t"), _Hit("d7", "corpus.jsonl", "u")]
    assert ranked_documents(beir, Question("q", "?", {"d3": 1})) == ["d7", "d3"]


def test_load_gold(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(
        '{"question": " Q? ", "doc": "./sub/a.md", "answer": "two\\n  lines"}\n\n'
        '{"id": "x", "question": "R?", "doc": "b.md"}\n'
    )
    assert load_gold(path) == [Question("1", "Q?", {"sub/a.md": 1}, "two lines"), Question("x", "R?", {"b.md": 1})]
    path.write_text("")
    with pytest.raises(UsageError, match="holds no questions"):
        load_gold(path)
    path.write_text('{"question": "Q", "doc": "a.md", "answer": ""}\n')
    with pytest.raises(UsageError, match=re.escape("g.jsonl:1: `answer` must be")):
        load_gold(path)


def test_load_beir_grades_and_header(tmp_path):
    queries = _write_jsonl(tmp_path / "q.jsonl", [{"_id": 1, "text": "a"}, {"_id": "2", "text": "b"}])
    qrels = tmp_path / "r.tsv"
    qrels.write_text("1\tx\t2\n1\ty\t1\n2\tz\t0\n")
    warned: list[str] = []
    assert load_beir(queries, qrels, warned.append) == [Question("1", "a", {"x": 2, "y": 1})]
    assert warned == []


def test_score_exact_values():
    questions = [Question("1", "?", {"a": 1}), Question("2", "?", {"b": 2, "c": 1}), Question("3", "?", {"z": 1})]
    ranked = {"vector": [["x", "a"], ["c", "y", "b"], ["x"]]}
    report = score(questions, ranked, k=2, depth=3)
    s = report.modes["vector"]
    assert s.recall == pytest.approx((1 + 0.5 + 0) / 3)
    assert s.mrr == pytest.approx((0.5 + 1 + 0) / 3)
    ideal = 2 + 1 / 1.5849625007211562
    assert s.ndcg == pytest.approx((1 / 1.5849625007211562 + 1 / ideal) / 3)
    assert s.no_hit == 1
    assert s.curve == pytest.approx([1 / 6, 1 / 2, 2 / 3])
    assert report.per_question[1]["ranks"] == {"vector": [1, 3]}
    assert report.per_question[2]["first_rank"] == {"vector": None}

    page = render(report)
    assert page.count("<svg") == 1 and "0.500" in page and "http" not in page
