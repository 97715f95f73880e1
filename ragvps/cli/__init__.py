"""The command line: parses flags, opens the App, calls one use case, renders text or --json.

One module per command group registers its commands on `app`; errors are rendered here, once.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from typer.core import TyperGroup
from typer.main import get_command_name
from typer.models import CommandInfo

from ragvps.app.names import choices
from ragvps.cli import (
    ask,
    audit,
    bundle,
    calibrate,
    chat,
    database,
    ingest,
    kb,
    measure,
    plan,
    search,
    serve,
    source,
    worker,
)
from ragvps.cli.common import err
from ragvps.errors import RagvpsError, redact


class _Group(TyperGroup):
    """Turns every RagvpsError into one line on stderr and its kind's exit code, with --verbose too (it is the
    user's to mend, and the line says how); only an unexpected error shows its traceback, with --verbose."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        _bare_flags(self)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except RagvpsError as exc:
            _fail(ctx, exc, exc.exit_code, traced=False)
        except KeyboardInterrupt:
            err.print("interrupted: finished work is saved; run the same command again to resume")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # `ragvps query ... | head`: the reader left, nothing to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except Exception as exc:
            if _is_click_control_flow(exc):
                raise
            _fail(ctx, exc, 1, prefix="unexpected error (run with --verbose for the traceback): ")


def _bare_flags(command: Any) -> None:
    """A flag takes no value, so --help shows none for it (typer 0.29 writes `<bool>` beside every flag)."""
    help_option = command.get_help_option(command.context_class(command))  # made once and kept by the command
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _bare_flags(sub)


def _is_click_control_flow(exc: Exception) -> bool:
    """Usage errors, --help and aborts: click's (or the copy of click that typer bundles) to handle."""
    return type(exc).__module__.startswith(("click.", "typer."))


def _fail(ctx: Any, exc: BaseException, code: int, prefix: str = "", traced: bool = True) -> None:
    if traced and (ctx.obj or {}).get("verbose"):
        err.print(escape(redact("".join(traceback.format_exception(exc)))))
    err.print(f"[red]error:[/red] {escape(prefix + redact(str(exc)))}")
    raise typer.Exit(code)


app = typer.Typer(
    cls=_Group,
    help="ragvps: a self-hosted RAG pipeline. Ingest a folder, query it, measure it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Option(help="Config file (default: ./ragvps.toml if present).")] = None,
    data_dir: Annotated[Path | None, typer.Option(help="Where stage files and the embedded database live.")] = None,
    database_url: Annotated[str | None, typer.Option(help="PostgreSQL DSN; empty: the embedded server.")] = None,
    embedder: Annotated[str | None, typer.Option(help=choices("embedder"))] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log details, and an unexpected error's traceback.")
    ] = False,
) -> None:
    ctx.obj = {
        "verbose": verbose,
        "config": config,
        "flags": {"data_dir": data_dir, "database_url": database_url, "embedder": embedder},
    }
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )


def _register() -> None:
    for module in (
        ingest,
        worker,
        search,
        ask,
        chat,
        plan,
        measure,
        calibrate,
        kb,
        bundle,
        database,
        serve,
        audit,
        source,
    ):
        module.register(app)


_register()


def main() -> None:
    from ragvps.app.reading import start_for_arguments  # lazy: as every use case

    command, args = split_command(sys.argv[1:])
    start_for_arguments(command, args)  # a reading command's PDF readers start while its command line is parsed
    lean(command)(prog_name="ragvps")


_VALUED = ("--config", "--data-dir", "--database-url", "--embedder")  # the root's options that take a value


def lean(word: str | None) -> typer.Typer:
    """`app` with only the command (or group) named `word`: typer turns every command's signature into click's as it
    starts, about 0.1 s for ragvps's forty, of which one is run. `app` itself for the root's help (None), or for a
    word that names no command (its error lists the commands)."""
    commands = [c for c in app.registered_commands if _name(c) == word]
    groups = [g for g in app.registered_groups if g.name == word]
    if not commands and not groups:
        return app
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return one


def _name(command: CommandInfo) -> str | None:
    return command.name or (get_command_name(command.callback.__name__) if command.callback else None)


def split_command(argv: list[str]) -> tuple[str | None, list[str]]:
    """The command's word (the first that is not the root's option or its value) and the words after it."""
    skip = False
    for k, word in enumerate(argv):
        if skip:
            skip = False
        elif word in _VALUED:
            skip = True
        elif not word.startswith("-"):
            return word, argv[k + 1 :]
    return None, []
