"""`ragvps chat` through the real CLI: a question and a follow-up on stdin, the follow-up retrieved with the
history (no LLM: the rule; with the stand-in LLM: the rewriting call), a bad turn that does not end it."""

from __future__ import annotations

from pathlib import Path

from support.llm_server import REWRITE_SYSTEM
from typer.testing import CliRunner

DOC = (
    "# Backups\n\nBackups run every night at 02:00 on the second disk. Each backup is kept for thirty days.\n\n"
    "## Restore\n\nA restore reads the newest backup and replays the journal on top of it.\n\n"
    "# Keys\n\nAPI keys are rotated with the admin page. A rotated key stays valid for one more day.\n"
)


def _ingest(cli, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ops.md").write_text(DOC)
    cli("ingest", str(docs))


def talk(cli, text: str, *args: str):
    from ragvps.cli import app

    return CliRunner().invoke(app, ["chat", *args], input=text, env=cli.env, catch_exceptions=False)


def test_a_follow_up_is_answered_with_the_history_and_ctrl_d_leaves(cli, tmp_path):
    _ingest(cli, tmp_path)
    r = talk(cli, "When do backups run?\n\nHow long is each one kept?\n")
    assert r.exit_code == 0, r.stderr
    answers = r.stdout.split("Extractive answer")
    assert len(answers) == 3, r.stdout  # two answers, nothing for the empty line
    assert "02:00" in answers[1] and "**Sources**" in answers[1] and "`ops.md`" in answers[1]
    assert "thirty days" in answers[2]
    assert "searched for: When do backups run? How long is each one kept?" in r.stderr


def test_a_bad_turn_says_why_and_the_conversation_goes_on(cli, tmp_path):
    _ingest(cli, tmp_path)
    r = talk(cli, "???\nHow does a restore work?\n")
    assert r.exit_code == 0, r.stderr
    assert "error:" in r.stderr and "no words" in r.stderr
    assert "replays the journal" in r.stdout
    assert "searched for" not in r.stderr  # the bad turn is not part of the history


def test_with_an_llm_the_follow_up_is_rewritten(cli, tmp_path, llm):
    _ingest(cli, tmp_path)
    cli.env |= {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
    }
    r = talk(cli, "How are API keys rotated?\nand how long does the old one stay valid?\n")
    assert r.exit_code == 0, r.stderr
    systems = [req["system"].startswith(REWRITE_SYSTEM) for req in llm.llm_requests()]
    assert systems == [False, True, False]
    assert "searched for: and how long does the old one stay valid? (following: How are API keys rotated?)" in r.stderr
    assert "prompt tokens" in r.stderr


def test_a_terminal_shows_the_source_list_without_markdown_marks():
    from ragvps.cli.chat import on_terminal

    footer = "\n\n**Sources**\n- [1] `serve.md` \u203a Serving \u203a API keys\n- [2] `chat.md`"
    assert on_terminal(footer) == "\n\nSources:\n- [1] serve.md \u203a Serving \u203a API keys\n- [2] chat.md"
    assert on_terminal("a `code` piece [1]") == "a `code` piece [1]"  # the answer itself is left as it is
