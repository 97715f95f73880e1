"""What `--help` shows (issue 51): a flag takes no value, so no command's help shows a value beside one (typer 0.29
wrote `<bool>` beside every flag, --help included)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main
from typer.testing import CliRunner

from ragvps.cli import app


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from commands(sub, (*path, name))


def test_no_flag_shows_a_value_in_any_commands_help():
    paths = list(commands(typer.main.get_command(app)))
    assert len(paths) > 30 and ("kb", "create") in paths
    for path in paths:
        done = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
        assert done.exit_code == 0, (path, done.output)
        assert "--help" in done.output and "<bool>" not in done.output, (path, done.output)
    assert "<int>" in CliRunner().invoke(app, ["query", "--help"], env={"COLUMNS": "120"}).output  # values still shown


def test_every_command_the_docs_name_exists():
    import re

    from support.serve_server import REPO

    known = set(commands(typer.main.get_command(app)))
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    named = {
        (page.name, tuple(m.group(1).split()))
        for page in pages
        for m in re.finditer(r"`ragvps ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)", page.read_text(encoding="utf-8"))
    }
    assert len(named) > 20
    for page, words in sorted(named):
        # `ragvps kb create` is a command; `ragvps ingest docs` is a command and an argument
        assert words in known or words[:1] in known, f"{page} names `ragvps {' '.join(words)}`, which does not exist"


def test_a_count_of_one_reads_in_the_singular():
    from ragvps.cli.common import counted

    assert [counted(n, "item") for n in (0, 1, 2, 1024)] == ["0 items", "1 item", "2 items", "1,024 items"]


def test_an_audit_filter_that_matches_nothing_known_is_an_error_naming_the_valid_ones(cli):
    bad = cli("audit", "--action", "serch", expect=2)
    assert "--action 'serch' is not one the audit log records" in bad.stderr and "search" in bad.stderr
    cli("kb", "create", "other")
    bad = cli("audit", "--kb", "nosuch", expect=2)
    assert "--kb 'nosuch': there is no such knowledge base" in bad.stderr and "other" in bad.stderr
    assert cli("audit", "--kb", "other").exit_code == 0  # known, nothing in it yet: the empty table
    assert "nobody yet" in cli("users").stdout
    assert "no sources to sync" in cli("sync").stdout


def test_each_command_built_alone_reads_as_the_whole_apps():
    """`ragvps` hands typer only the command its words name (cli.lean, 0.1 s sooner): each command's help and a wrong
    option read as the whole app's do, and the root's help or a word that names no command get the whole app."""
    from ragvps.cli import lean, split_command

    env = {"COLUMNS": "120"}
    paths = [path for path in commands(typer.main.get_command(app)) if path]
    for path in paths:
        one = lean(path[0])
        assert one is not app and len(one.registered_commands) + len(one.registered_groups) == 1, path
        for args in ([*path, "--help"], [*path, "--no-such-option"]):
            whole, alone = CliRunner().invoke(app, args, env=env), CliRunner().invoke(one, args, env=env)
            assert (alone.exit_code, alone.output) == (whole.exit_code, whole.output), args
    assert lean(None) is app and lean("chnk") is app
    near = CliRunner().invoke(lean("chnk"), ["chnk"], env=env)
    assert near.exit_code == 2 and "chunk" in near.output  # the whole app's error, which suggests the command
    assert split_command(["--config", "x.toml", "--verbose", "kb", "list"]) == ("kb", ["list"])
    assert split_command(["--data-dir", "chunk", "ingest", "docs"]) == ("ingest", ["docs"])
    assert split_command(["-v"]) == (None, []) and split_command(["--help"]) == (None, [])
