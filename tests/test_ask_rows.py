"""A table row the question names answers it (issue 51 part 4): "what does GET /health return?" over the real
docs/serve.md was refused by the evidence gate (evidence 0.26 with USE, 0.33 with MiniLM, the gate at 0.40), though
the row answering it was retrieved: a row is mostly its subject's words, not the question's verbs. A specific first
cell named by the question is evidence of its own; a common word in a first cell is not."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragvps.app import App, AskRequest
from ragvps.config import Settings
from ragvps.generate.prompt import REFUSAL
from ragvps.text import named_rows

REPO = Path(__file__).resolve().parents[1]
PEOPLE = (
    "# Team page\n\nThe team page lists what each field of the rota file holds.\n\n"
    "| field | what it holds |\n|---|---|\n| name | the person on call this week |\n| phone | their pager |\n"
)


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory, module_db_url: str) -> Iterator[Settings]:
    root = tmp_path_factory.mktemp("rows")
    shutil.copy(REPO / "docs" / "serve.md", root / "serve.md")
    (root / "people.md").write_text(PEOPLE)
    settings = Settings.of(database_url=module_db_url, data_dir=root.parent / "data-rows", answer_cache=False)
    with App.open(settings) as app:
        app.ingest(root)
    yield settings


def test_a_question_naming_a_table_row_is_answered_with_that_row(docs: Settings):
    with App.open(docs) as app:
        a = app.ask(AskRequest("what does GET /health return?"))
    assert a.answered, (a.answer, a.evidence)
    assert a.answer.splitlines()[1].startswith('- "`GET /health` | `{"status": "ok"')
    assert [s.path for s in a.sources] == ["serve.md"]


def test_a_common_word_in_a_first_cell_is_no_evidence(docs: Settings):
    with App.open(docs) as app:
        a = app.ask(AskRequest("What is the name of the president of France?"))
    assert a.answer == REFUSAL and not a.answered
    assert named_rows(PEOPLE, "what is the name of the president?")  # named, but by words any question may use
    assert named_rows(PEOPLE, "what is the name of the president?", specific=True) == []
    assert named_rows("| API keys | the keys table |\n", "how do API keys work?", specific=True) == []
    assert named_rows("| `chunk_size` | 400 |\n", "what does chunk_size set?", specific=True)
    assert named_rows("| `ragvps ingest` | reads a folder |\n", "what does ragvps ingest do?", specific=True)
