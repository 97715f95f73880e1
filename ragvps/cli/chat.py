"""`ragvps chat`: a conversation on the terminal, with the history kept in memory; Ctrl-D leaves.

The same use case as /v1/chat/completions: each follow-up is made standalone before retrieval.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from ragvps.cli.common import (
    KbOption,
    KOption,
    MetaOption,
    ModeOption,
    PathPrefixOption,
    err,
    flag_names,
    metadata_pairs,
    open_app,
)
from ragvps.errors import RagvpsError

if TYPE_CHECKING:
    from ragvps.app import App, ChatAnswer, ChatRequest


def chat(
    ctx: typer.Context,
    k: KOption = None,
    mode: ModeOption = "hybrid",
    path_prefix: PathPrefixOption = "",
    meta: MetaOption = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the answer cache.")] = False,
    kb: KbOption = None,
    markdown: Annotated[
        bool | None,
        typer.Option(
            "--markdown/--plain",
            help="Render the answers' Markdown (code "
            "blocks, lists, tables) or print it as it is (default: render on "
            "a terminal).",
        ),
    ] = None,
) -> None:
    """Talk to the knowledge base: a question, then follow-ups that refer to it ("and how do I undo that?").

    One question a line; the answer cites its sources [n] and lists them. Ctrl-D (end of input) leaves;
    Ctrl-C stops the answer being written.
    """
    # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app import ChatRequest, Filters, Overrides

    overrides = Overrides(k=k, mode=mode, filters=Filters(path_prefix, metadata_pairs(meta or [])))  # type: ignore[arg-type]
    interactive, streaming = sys.stdin.isatty(), sys.stdout.isatty()
    rendered = streaming if markdown is None else markdown
    messages: list[tuple[str, str]] = []
    with flag_names({"mode": "--mode", "k": "--k"}), open_app(ctx, kb=kb) as app:
        if interactive:
            err.print("Ask a question; follow-ups may refer to earlier answers. Ctrl-D leaves.")
        while True:
            try:
                if interactive:
                    err.print("[bold]> [/bold]", end="")
                line = sys.stdin.readline()
            except KeyboardInterrupt:
                break
            if not line:  # Ctrl-D
                break
            if not (question := line.strip()):
                continue
            request = ChatRequest((*messages, ("user", question)), overrides, use_cache=not no_cache)
            answer = _turn(app, request, rendered, streaming)
            if answer is None:
                continue
            typer.echo("" if streaming or rendered else answer.content)
            err.print(escape(_notes(answer)))
            messages += [("user", question), ("assistant", answer.content)]
    if interactive:
        err.print("")


def _turn(app: App, request: ChatRequest, rendered: bool, streaming: bool) -> ChatAnswer | None:
    """One answer, written as it comes when `streaming`; None when Ctrl-C stopped it or it failed in a way the
    conversation outlives (said on stderr)."""
    try:
        return (
            rendered_chat(app, request, streaming)
            if rendered
            else app.chat(request, on_token=_show if streaming else None)
        )
    except KeyboardInterrupt:
        err.print("\n(stopped; ask again, or Ctrl-D to leave)")
    except RagvpsError as exc:  # one bad turn does not end the conversation
        if exc.kind not in ("usage", "too_long", "unavailable"):
            raise
        err.print(f"[red]error:[/red] {escape(str(exc))}")
    return None


def _show(piece: str) -> None:
    """A streamed piece of the answer, as it comes."""
    sys.stdout.write(on_terminal(piece))
    sys.stdout.flush()


def rendered_chat(app: App, request: ChatRequest, live: bool) -> ChatAnswer:
    """The answer's Markdown rendered with rich (code blocks without their fences, lists, tables); on a terminal
    redrawn as it streams."""
    # lazy: only `chat` renders Markdown (rich's markdown-it and pygments: 30 ms of every command's start-up)
    from rich.live import Live
    from rich.markdown import Markdown

    console = Console(file=sys.stdout, soft_wrap=False)
    if not live:
        answer = app.chat(request)
        console.print(Markdown(answer.content))
        return answer
    text = ""
    with Live(Markdown(""), console=console, refresh_per_second=8, vertical_overflow="visible") as view:

        def show(piece: str) -> None:
            nonlocal text
            text += piece
            view.update(Markdown(text))

        return app.chat(request, on_token=show)


def on_terminal(text: str) -> str:
    """The answer's Markdown source list as a terminal shows it: a plain heading, paths without backticks."""
    from ragvps.app.chat import SOURCES_HEADING  # lazy: the use case loads when the command runs (--help start-up)

    if SOURCES_HEADING not in text:
        return text
    return re.sub(r"(?m)^(- \[\d+\] )`([^`]*)`", r"\1\2", text.replace(SOURCES_HEADING, "Sources:"))


def _notes(answer: ChatAnswer) -> str:
    """The line under an answer: what was searched for, who answered, the cache, the tokens."""
    notes = []
    if answer.standalone != answer.question:
        notes.append(f"searched for: {answer.standalone}")
    a = answer.answer
    notes.append(f"{a.generator}" + (f" {a.model}" if a.model and not a.extractive else "") + f"; cache {a.cache}")
    if not a.extractive:
        notes.append(answer.usage.described())
    return "; ".join(notes)


def register(app: typer.Typer) -> None:
    app.command()(chat)
