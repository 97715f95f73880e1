"""What every command shares: the settings from the context, the App, warnings, progress bars."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from ragvps.app.names import choices
from ragvps.config import SETTINGS, load_settings
from ragvps.errors import RagvpsError, UsageError

if TYPE_CHECKING:
    from ragvps.app import App
    from ragvps.config import Settings

err = Console(stderr=True, highlight=False, soft_wrap=True)

# The knowledge base a command reads or writes; default: the setting kb (RAGVPS_KB, ragvps.toml), or `default`.
KbOption = Annotated[str | None, typer.Option("--kb", help="The knowledge base (setting kb; default: default).")]
# The search flags of query, ask and chat, declared once.
KOption = Annotated[
    int | None,
    typer.Option(
        "--k", "-k", help="How many chunks (default: top_k for query, answer_chunks for ask and chat; at most max_k)."
    ),
]
ModeOption = Annotated[str, typer.Option(help=choices("mode"))]
PathPrefixOption = Annotated[str, typer.Option(help="Only chunks from source files whose path starts so.")]
MetaOption = Annotated[
    list[str] | None,
    typer.Option(
        help="Only chunks whose document or chunk metadata has KEY=VALUE (VALUE as JSON, else text); repeatable."
    ),
]


def settings_from(ctx: typer.Context, **flags: Any) -> Settings:
    obj = ctx.obj or {}
    return load_settings(obj.get("config"), **(obj.get("flags", {}) | flags))


@contextmanager
def open_app(
    ctx: typer.Context, *, database: bool = True, pooled: bool = False, reading: str | None = None, **flags: Any
) -> Iterator[App]:
    """The App for this command, bound to its knowledge base, with the command's flags over the settings;
    `database=False` for a command that needs none (chunk, plan); `pooled` for one that needs two connections;
    `reading`, the path a command reads files from (the PDF reader starts as the use case loads)."""
    settings = settings_from(ctx, **flags)
    if reading is not None:
        from ragvps.app.reading import start_readers  # lazy: as App below

        start_readers(reading)
    from ragvps.app import App  # lazy: the use case loads when the command runs (--help start-up)

    with App.open(settings, database=database, pooled=pooled) as app:
        yield app


@contextmanager
def flag_names(flags: Mapping[str, str]) -> Iterator[None]:
    """Errors name inputs as settings (`chunk_size`); say them as this command's flags (`--chunk-size`)."""
    try:
        yield
    except RagvpsError as exc:
        message = str(exc)
        named = [name for name in exc.settings if name in flags]
        if not named:
            raise
        for name in named:
            message = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w=])", flags[name], message)

        settings = [name for name in named if name in SETTINGS]
        if settings:
            message += f" (setting {', '.join(settings)})"
        raise type(exc)(message, kind=exc.kind, settings=exc.settings) from None


def counted(n: int, noun: str) -> str:
    """`1 item`, `2 items`, `1,024 files`: a count with its noun in the number it needs."""
    return f"{n:,} {noun if n == 1 else noun + 's'}"


def warn(message: str) -> None:
    err.print(f"[yellow]warning:[/yellow] {escape(message)}")


def echo_json(data: Any) -> None:
    from ragvps.app.rendering import jsonable  # lazy: the use case loads when the command runs (--help start-up)

    typer.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))


def metadata_pairs(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--meta {pair!r} is not KEY=VALUE (e.g. --meta lang=en)")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def skipped_text(skipped: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))


def _rate_column() -> Any:
    """Items per second of a bar (each embedding host has its own bar, so its own rate)."""
    from rich.progress import ProgressColumn  # lazy: only a command that draws bars loads them (--help start-up)

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text(f"{task.speed:,.1f}/s" if task.speed else "", style="progress.data.speed")

    return Rate()


class Bars:
    """One rich progress bar per stage, on stderr."""

    def __init__(self) -> None:
        # lazy: only a command that draws bars loads them (--help start-up)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description:>6}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            _rate_column(),
            console=err,
            transient=False,
        )
        self.tasks: dict[str, Any] = {}
        self.started = False
        self.lock = threading.Lock()  # several embedding hosts report from their own threads

    def __call__(self, stage: str, done: int, total: int) -> None:
        with self.lock:
            if not self.started:  # started on the first report: an early error prints no empty bar line
                self.progress.start()
                self.started = True
            if stage not in self.tasks:
                self.tasks[stage] = self.progress.add_task(stage, total=total)
            self.progress.update(self.tasks[stage], completed=done, total=total)

    def __enter__(self) -> Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()
