"""`ragvps calibrate` (issue 33): the refusal line and the fusion fitted on a knowledge base's own questions, kept
per knowledge base with --apply, reported by `ragvps stats`; weighted RRF and the convex fusion."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support.serve_server import ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app
from ragvps.measure import fusion_fit
from ragvps.retrieve.fusion import convex, rrf

TOPICS = [
    "lighthouse lamp",
    "harbour crane",
    "ferry timetable",
    "tide gauge",
    "fog horn",
    "buoy mooring",
    "pilot boat",
    "dry dock",
    "cargo manifest",
    "customs office",
    "fish market",
    "sea wall",
    "breakwater repair",
    "channel dredging",
    "marina berth",
    "radio beacon",
    "coast guard",
    "sail loft",
    "rope works",
    "boat yard",
    "harbour master",
    "quay lighting",
    "ice breaker",
    "salt store",
    "net mending",
    "tug crew",
    "weather station",
    "signal flags",
    "pier gate",
    "fuel dock",
]
WORDS = (
    "inspect",
    "adjust",
    "record",
    "repair",
    "replace",
    "measure",
    "clean",
    "paint",
    "secure",
    "register",
    "report",
    "schedule",
    "verify",
    "tighten",
    "calibrate",
    "lubricate",
    "patrol",
    "document",
    "approve",
)


def corpus(root: Path) -> Path:
    rng = random.Random(7)
    (root / "docs").mkdir(parents=True)
    for i, topic in enumerate(TOPICS):
        a, b, c = rng.sample(WORDS, 3)
        text = (
            f"# The {topic}\n\n## Duties\n\nThe {topic} crew must {a} the {topic} every {i + 2} days and "
            f"{b} each finding in the {topic} logbook number {1000 + i}.\n\n## Season\n\nIn winter the "
            f"{topic} team will {c} equipment near berth {i * 7 % 50} before the storms of month {i % 12 + 1}.\n"
        )
        (root / "docs" / f"{topic.replace(' ', '-')}.md").write_text(text)
    return root / "docs"


def cli(env: dict[str, str], *args: str) -> str:
    done = CliRunner().invoke(
        cli_app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    return done.stdout


@pytest.fixture
def env(db_url: str, tmp_path: Path) -> dict[str, str]:
    env = ragvps_env(db_url, tmp_path / "data")
    cli(env, "ingest", str(corpus(tmp_path)))
    return env


def test_the_line_is_fitted_on_the_corpus_and_kept_with_apply(env: dict[str, str]):
    shown = json.loads(cli(env, "calibrate", "--json"))
    questions, curve, chosen = shown["questions"], shown["curve"], shown["chosen"]
    assert questions["answerable"] >= 20 and questions["unanswerable"] >= 1 and questions["off_topic"] >= 40
    answered = [p["answered"] for p in curve]
    assert answered == sorted(answered, reverse=True)  # a higher line never answers more
    assert [p["refused_off_topic"] for p in curve] == sorted(p["refused_off_topic"] for p in curve)
    assert chosen["answered"] >= 0.90 and chosen["refused_off_topic"] >= 0.9
    higher = [p for p in curve if p["line"] > chosen["line"]]
    assert not higher or higher[0]["answered"] < 0.90  # the highest line that meets the target
    assert not shown["applied"]
    assert "from the default" in cli(env, "stats")
    assert json.loads(cli(env, "stats", "--json"))["fusion"] == {
        "fusion": "zscore",
        "vector_weight": 1.0,
        "rrf_k": 60,
        "from": "the default",
    }

    kept = json.loads(cli(env, "calibrate", "--apply", "--json"))
    assert kept["chosen"] == chosen  # the same questions, the same line
    stats = json.loads(cli(env, "stats", "--json"))
    assert stats["refusal"]["line"] == chosen["line"] and "ragvps calibrate --apply" in stats["refusal"]["from"]
    assert "refusal line: answer_min_evidence" in cli(env, "stats")
    from ragvps.config import Settings
    from ragvps.db import catalog
    from ragvps.db.database import connect

    with connect(Settings.of(database_url=env["RAGVPS_DATABASE_URL"])) as conn:
        kept_settings = catalog.require(conn, "default").settings
    assert kept_settings["answer_min_evidence"] == chosen["line"]
    fusion = kept["fusion"]  # fitted on sentences of two-section pages, each asked without its own chunk
    assert fusion["source"] == "sentences" and fusion["questions"] >= 20 and fusion["applies"]
    assert 0 < fusion["current_mrr"] <= fusion["mrr"] <= 1
    assert (kept_settings["fusion"], kept_settings["rrf_k"], kept_settings["vector_weight"]) == (
        fusion["fusion"],
        fusion["rrf_k"],
        fusion["vector_weight"],
    )
    assert "sentences of the chunks, each asked without its chunk" in cli(env, "calibrate")
    in_force = json.loads(cli(env, "stats", "--json"))["fusion"]
    assert in_force["fusion"] == fusion["fusion"] and "ragvps calibrate --apply" in in_force["from"]
    assert f"fusion: {fusion['fusion']}, vector_weight" in cli(env, "stats")


def test_a_calibration_stays_in_its_knowledge_base(env: dict[str, str], tmp_path: Path):
    cli(env, "kb", "create", "other")
    cli(env, "ingest", str(tmp_path / "docs"), "--kb", "other")
    cli(env, "calibrate", "--apply", "--kb", "other", "--target", "0.99")
    assert "ragvps calibrate" in json.loads(cli(env, "stats", "--json", "--kb", "other"))["refusal"]["from"]
    assert json.loads(cli(env, "stats", "--json"))["refusal"] == {"line": 0.4, "from": "the default"}


def test_too_small_a_knowledge_base_is_told_to_grow(db_url: str, tmp_path: Path):
    env = ragvps_env(db_url, tmp_path / "data")
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.md").write_text("# One\n\nA single short page about the harbour crane and its hook.\n")
    cli(env, "ingest", str(tmp_path / "one"))
    done = CliRunner().invoke(cli_app, ["calibrate"], env={k: v for k, v in env.items() if k.startswith("RAGVPS_")})
    assert done.exit_code != 0 and "fewer than 10 answerable questions" in done.output and "ingest more" in done.output


def test_weighted_rrf_leans_on_the_heavier_leg():
    vector, keyword = [1, 2, 3], [3, 2, 1]
    equal = dict(rrf([vector, keyword], 60))
    assert equal[1] == equal[3] > equal[2]  # equal weights: the two ends tie
    assert rrf([vector, keyword], 60, [2.0, 1.0])[0][0] == 1
    assert rrf([vector, keyword], 60, [1.0, 2.0])[0][0] == 3


def test_gold_questions_are_the_answerable_ones_and_their_documents_are_never_held_out(
    env: dict[str, str], tmp_path: Path
):
    from ragvps.measure.calibrate import HeldOut

    def gold(name: str, topics: list[str]) -> Path:
        path = tmp_path / name
        path.write_text(
            "\n".join(
                json.dumps({"question": f"how often does the {t} crew work?", "doc": f"{t.replace(' ', '-')}.md"})
                for t in topics
            )
            + "\n"
        )
        return path

    held = [t for t in TOPICS if HeldOut()(f"{t.replace(' ', '-')}.md")]
    assert held  # the corpus has a document the rule holds out
    kept = gold("kept.jsonl", [t for t in TOPICS if t not in held])
    shown = json.loads(cli(env, "calibrate", "--gold", str(kept), "--json"))
    assert shown["gold"] == str(kept)
    assert shown["questions"]["answerable"] == len(TOPICS) - len(held)  # the gold ones, none made from chunks
    assert shown["questions"]["unanswerable"] >= 1  # still made from the held-out document
    assert shown["fusion"]["mrr"] > 0.5
    assert "gold questions from" in cli(env, "calibrate", "--gold", str(kept))

    every = json.loads(cli(env, "calibrate", "--gold", str(gold("every.jsonl", TOPICS)), "--apply", "--json"))
    assert every["questions"]["unanswerable"] == 0  # a gold document is never held out of retrieval
    assert every["questions"]["answerable"] == len(TOPICS)
    assert every["fusion"]["applies"]  # fitted on gold questions: --apply keeps the fusion too
    from ragvps.config import Settings
    from ragvps.db import catalog
    from ragvps.db.database import connect

    with connect(Settings.of(database_url=env["RAGVPS_DATABASE_URL"])) as conn:
        kept = catalog.require(conn, "default").settings
    assert kept["rrf_k"] == every["fusion"]["rrf_k"]
    assert kept["vector_weight"] == every["fusion"]["vector_weight"]
    assert kept["fusion"] == every["fusion"]["fusion"] and every["fusion"]["source"] == "gold"

    stray = gold("stray.jsonl", ["nowhere"])
    done = CliRunner().invoke(
        cli_app, ["calibrate", "--gold", str(stray)], env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}
    )
    assert done.exit_code != 0 and "'nowhere.md'" in done.output and "relative to the ingested folder" in done.output


def test_convex_fusion_weighs_normalised_scores():
    vector, keyword = [(1, 0.9), (2, 0.5), (3, 0.1)], [(3, 10.0), (4, 5.0)]
    assert convex([vector, keyword]) == [(1, 0.5), (3, 0.5), (2, 0.25), (4, 0.0)]  # min-max each, mean of the two
    assert convex([vector, keyword], [3.0, 1.0])[:2] == [(1, 0.75), (2, 0.375)]
    assert convex([[(7, 0.2)], []]) == [(7, 1.0)]  # one candidate is its leg's best; an empty leg counts nothing


def _legs(n: int, gold_in_keyword: bool) -> list[fusion_fit.Legs]:
    """n questions whose gold chunk (id 100) is the vector leg's first; the keyword leg's first is another chunk
    (id 1, so it wins equal-weight ties), and has the gold one second when `gold_in_keyword`."""
    out = []
    for i in range(n):
        vector = [(100, 0.9), *((200 + j, 0.8 - j / 100) for j in range(9))]
        keyword = [(1, 12.0), *([(100, 11.0)] if gold_in_keyword else []), *((300 + j, 10.0 - j) for j in range(8))]
        out.append(fusion_fit.Legs(fusion_fit.FusionProbe(f"q{i}", frozenset({100})), tuple(vector), tuple(keyword)))
    return out


def test_the_fit_moves_off_the_fusion_in_force_only_when_the_questions_tell_them_apart():
    from ragvps.config import Settings

    settings = Settings.of(fusion="rrf")
    leaning = fusion_fit.fit(_legs(30, False), settings, "sentences")
    assert leaning.current_mrr == 0.5 and leaning.mrr == 1.0  # equal RRF ties the two firsts; the gold loses
    # of those that find it first, the nearest to equal weights: standard scores at equal weights
    assert (leaning.fusion, leaning.vector_weight) == ("zscore", 1.0) and leaning.applies
    assert not leaning.same_as(settings)
    both = fusion_fit.fit(_legs(30, True), settings, "sentences")  # RRF already puts it first: kept
    assert both.same_as(settings) and both.mrr == both.current_mrr == 1.0
    few = fusion_fit.fit(_legs(5, False), settings, "sentences")
    assert few.source == "none" and not few.applies and few.same_as(settings)


def test_a_knowledge_base_of_one_chunk_documents_keeps_its_fusion(db_url: str, tmp_path: Path):
    env = ragvps_env(db_url, tmp_path / "data")
    docs = tmp_path / "short"
    docs.mkdir()
    for i, topic in enumerate(TOPICS):
        (docs / f"{i}.md").write_text(f"The {topic} crew works {i + 2} days a week near berth {i * 7 % 50}.\n")
    cli(env, "ingest", str(docs))
    fusion = json.loads(cli(env, "calibrate", "--apply", "--json"))["fusion"]
    assert fusion["source"] == "none" and not fusion["applies"]  # no sentence has a neighbour chunk to find
    assert "fewer than 20 questions to fit it on" in cli(env, "calibrate")


def test_a_weight_kept_under_its_old_name_is_read_as_today_s(db_url: str, tmp_path: Path, caplog):
    from ragvps.app.core import App
    from ragvps.config import Settings
    from ragvps.db import catalog
    from ragvps.db.database import connect

    settings = Settings.of(database_url=db_url, data_dir=str(tmp_path / "data"))
    with App.open(settings):
        pass
    with connect(settings) as conn:
        catalog.update_settings(conn, "default", {"rrf_vector_weight": 1.5})
        conn.commit()
    with caplog.at_level("WARNING"), App.open(settings) as app:
        assert app.settings.search.vector_weight == 1.5
    assert "rrf_vector_weight" not in caplog.text  # nothing for the user to rename: it is stored
