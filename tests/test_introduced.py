"""A quoted sentence ending in a colon brings what it introduces: the command, list or table right after it
(ragvps.text.introduced), also when the chunker cut between them (the next chunk is read). The gold set is every
"how do I ..." question in docs/ whose answer is a command introduced by a colon (bench/data/introduced_gold.jsonl);
on main before this change none of the three answers held its command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.asgi_server import InProcess

from ragvps.text import introduced

GOLD = [
    json.loads(line)
    for line in (Path(__file__).resolve().parents[1] / "bench" / "data" / "introduced_gold.jsonl")
    .read_text()
    .splitlines()
]


def block(text: str) -> str | None:
    span = introduced(text, text.index(":") + 1)
    return None if span is None else text[span[0] : span[1]]


def test_a_colon_introduces_the_fence_list_or_table_below_it():
    assert (
        block("To stop it, run:\n\n```bash\nragvps server stop\n```\n\nThen more.")
        == "```bash\nragvps server stop\n```"
    )
    assert (
        block("Refused:\n\n- a password file\n  on two lines\n- a zip bomb\n\nNext.")
        == "- a password file\n  on two lines\n- a zip bomb"
    )
    assert block("Sizes:\n| a | b |\n|---|---|\n| 1 | 2 |\nAfter.") == "| a | b |\n|---|---|\n| 1 | 2 |"


@pytest.mark.parametrize(
    "text",
    [
        "Install the extra: `pip install x` first.",
        "Run:\n\n```bash\ncut off",
        "It says:\n\nA plain paragraph.",
        "Ends here:",
    ],
)
def test_nothing_is_introduced_without_a_whole_block_below(text: str):
    assert block(text) is None


@pytest.mark.parametrize("gold", GOLD, ids=[g["path"] for g in GOLD])
def test_the_extractive_answer_completes_an_introduced_command(api: InProcess, gold: dict[str, str]):
    answer = api.client().post("/ask", json={"question": gold["question"]}).json()
    assert gold["command"] in answer["answer"], answer["answer"]
    assert [c["path"] for c in answer["citations"]] == [gold["path"]]
    quote = answer["quotes"][0]
    assert quote["text"].endswith("```") and gold["command"] in quote["text"]
    assert "\n  ```bash\n" in answer["answer"]  # the block inside the quote's list item
