"""Bad input gets one clear line on stderr and a non-zero exit, never a traceback."""

from __future__ import annotations

import json

from ragvps.errors import redact


def test_missing_path(cli, tmp_path):
    result = cli("ingest", str(tmp_path / "nope"), expect=2)
    assert "nope does not exist" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_empty_folder(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    result = cli("ingest", str(tmp_path / "empty"), expect=1)
    assert "has no documents ragvps can read" in result.stderr


def test_invalid_utf8_is_read_with_a_warning(cli, tmp_path):
    folder = tmp_path / "latin1"
    folder.mkdir()
    (folder / "café.txt").write_bytes("Le café est très bon à Paris.".encode("latin-1"))
    result = cli("ingest", str(folder), "--json")
    assert "café.txt: not valid UTF-8" in " ".join(result.stderr.split())
    assert json.loads(result.stdout)["documents"] == 1


def test_unreachable_database_never_prints_the_password(cli, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.md").write_text("# A\n\ntext\n")
    cli.env["RAGVPS_DATABASE_URL"] = "postgresql://ragvps:hunter2secret@127.0.0.1:1/ragvps"
    result = cli("ingest", str(tmp_path / "d"), expect=1)
    out = result.stderr + result.stdout
    assert "cannot connect" in out and "127.0.0.1" in out
    assert "hunter2secret" not in out
    assert "Traceback" not in out
    assert len(result.stderr.strip().splitlines()) <= 3  # one message (rich may wrap it)


def test_verbose_keeps_a_users_mistake_to_one_line(cli, tmp_path):
    cli.env["RAGVPS_DATABASE_URL"] = "postgresql://ragvps:hunter2secret@127.0.0.1:1/ragvps"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.md").write_text("# A\n\ntext\n")
    result = cli("--verbose", "ingest", str(tmp_path / "d"), expect=1)
    errors = [line for line in result.stderr.splitlines() if not line.startswith(("INFO ", "WARNING "))]
    assert "cannot connect" in result.stderr and "Traceback" not in result.stderr
    assert "hunter2secret" not in result.stderr + result.stdout
    assert len(errors) <= 3  # one message (rich may wrap it), beside --verbose's log lines


def test_verbose_shows_an_unexpected_errors_traceback_without_its_secret(cli, monkeypatch):
    from ragvps.cli import plan

    def broken(*args: object) -> None:
        raise RuntimeError("defect while reading postgresql://ragvps:hunter2secret@db/ragvps")

    monkeypatch.setattr(plan, "_plan", broken)
    quiet = cli("plan", expect=1)
    assert "unexpected error (run with --verbose for the traceback)" in quiet.stderr
    assert "Traceback" not in quiet.stderr
    verbose = cli("--verbose", "plan", expect=1)
    assert "Traceback" in verbose.stderr and "RuntimeError" in verbose.stderr
    assert "hunter2secret" not in quiet.stderr + verbose.stderr


def test_punctuation_only_query(cli):
    result = cli("query", "?!...", expect=2)
    assert "has no words to search for" in result.stderr


def test_query_before_ingest(cli):
    result = cli("query", "anything", expect=2)
    assert "run `ragvps ingest PATH` first" in result.stderr


def test_bad_setting_names_the_setting(cli, tmp_path):
    cli.env["RAGVPS_EMBEDDER"] = "gpt"
    result = cli("query", "anything", expect=2)
    assert "embedder='gpt'" in result.stderr and "RAGVPS_EMBEDDER" in result.stderr


def test_redact_forms():
    assert redact("postgresql://u:pw@h/db") == "postgresql://u:***@h/db"
    assert redact("host=h password=pw user=u") == "host=h password=*** user=u"
    assert redact("postgresql://u@h/db") == "postgresql://u@h/db"


def test_help_and_usage_errors_are_clicks_own(cli):
    assert "Chunk, embed and store" in cli("ingest", "--help").stdout
    result = cli("no-such-command", expect=2)
    assert "No such command" in result.stderr and "unexpected error" not in result.stderr


def test_one_exit_rule_for_nothing_readable(cli, tmp_path):
    """Non-zero (1) when nothing usable is found, for ingest, chunk and plan alike; 0 when anything is stored."""
    only_bad = tmp_path / "only-bad"
    only_bad.mkdir()
    (only_bad / "blank.md").write_text("")
    (only_bad / "notes.docx").write_bytes(b"PK\x03\x04")
    for args in (("ingest", str(only_bad)), ("chunk", str(only_bad)), ("plan", "--path", str(only_bad))):
        result = cli(*args, expect=1)
        assert "has no documents ragvps can read" in " ".join(result.stderr.split()), args
        assert "unexpected error" not in result.stderr
    (only_bad / "good.md").write_text("# Good\n\nThis page can be read and stored.\n")
    result = cli("ingest", str(only_bad), "--json", expect=0)
    assert '"stored": 1' in result.stdout and '"skipped"' in result.stdout
