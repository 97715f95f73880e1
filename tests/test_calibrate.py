"""`ragvps calibrate` (issue 33): the refusal line and the fusion fitted on a knowledge base's own questions, kept
per knowledge base with --apply, reported by `ragvps stats`; weighted RRF."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from serve_server import ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app
from ragvps.retrieve.fusion import rrf

TOPICS = ["lighthouse lamp", "harbour crane", "ferry timetable", "tide gauge", "fog horn", "buoy mooring",
          "pilot boat", "dry dock", "cargo manifest", "customs office", "fish market", "sea wall",
          "breakwater repair", "channel dredging", "marina berth", "radio beacon", "coast guard", "sail loft",
          "rope works", "boat yard", "harbour master", "quay lighting", "ice breaker", "salt store",
          "net mending", "tug crew", "weather station", "signal flags", "pier gate", "fuel dock"]
WORDS = ("inspect", "adjust", "record", "repair", "replace", "measure", "clean", "paint", "secure", "register",
         "report", "schedule", "verify", "tighten", "calibrate", "lubricate", "patrol", "document", "approve")


def corpus(root: Path) -> Path:
    rng = random.Random(7)
    (root / "docs").mkdir(parents=True)
    for i, topic in enumerate(TOPICS):
        a, b, c = rng.sample(WORDS, 3)
        text = (f"# The {topic}\n\n## Duties\n\nThe {topic} crew must {a} the {topic} every {i + 2} days and "
                f"{b} each finding in the {topic} logbook number {1000 + i}.\n\n## Season\n\nIn winter the "
                f"{topic} team will {c} equipment near berth {i * 7 % 50} before the storms of month {i % 12 + 1}.\n")
        (root / "docs" / f"{topic.replace(' ', '-')}.md").write_text(text)
    return root / "docs"


def cli(env: dict[str, str], *args: str) -> str:
    done = CliRunner().invoke(cli_app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")},
                              catch_exceptions=False)
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
    assert not kept["fusion"]["applies"]  # fitted on questions made from chunks: reported, never kept
    assert "rrf_k" not in kept_settings and "rrf_vector_weight" not in kept_settings


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


def test_gold_questions_are_the_answerable_ones_and_their_documents_are_never_held_out(env: dict[str, str],
                                                                                        tmp_path: Path):
    from ragvps.measure.calibrate import HeldOut

    def gold(name: str, topics: list[str]) -> Path:
        path = tmp_path / name
        path.write_text("\n".join(json.dumps({"question": f"how often does the {t} crew work?",
                                               "doc": f"{t.replace(' ', '-')}.md"}) for t in topics) + "\n")
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
    assert kept["rrf_vector_weight"] == every["fusion"]["vector_weight"]

    stray = gold("stray.jsonl", ["nowhere"])
    done = CliRunner().invoke(cli_app, ["calibrate", "--gold", str(stray)],
                              env={k: v for k, v in env.items() if k.startswith("RAGVPS_")})
    assert done.exit_code != 0 and "'nowhere.md'" in done.output and "relative to the ingested folder" in done.output
