"""`ragvps ask`: an answer with cited sources; streams on a terminal, --json for machines."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from ragvps.cli.common import (
    KbOption,
    KOption,
    MetaOption,
    ModeOption,
    PathPrefixOption,
    echo_json,
    err,
    flag_names,
    metadata_pairs,
    open_app,
)

if TYPE_CHECKING:
    from ragvps.app import PromptPreview


def ask(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question.")],
    k: KOption = None,
    mode: ModeOption = "hybrid",
    path_prefix: PathPrefixOption = "",
    meta: MetaOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the answer, citations, usage as JSON.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Neither read nor write the answer cache.")] = False,
    show_prompt: Annotated[
        bool, typer.Option("--show-prompt", help="Print the exact prompt and its token count; send nothing.")
    ] = False,
    kb: KbOption = None,
) -> None:
    """Answer a question from the ingested documents, citing the chunks it used.

    With no generator configured the answer is extractive: the best-matching sentences, quoted.
    """
    # lazy: the use case loads when the command runs (--help start-up)
    from ragvps.app import AskRequest, Filters, Overrides

    overrides = Overrides(k=k, mode=mode, filters=Filters(path_prefix, metadata_pairs(meta or [])))  # type: ignore[arg-type]
    request = AskRequest(question, overrides, use_cache=not no_cache)
    with flag_names({"mode": "--mode", "k": "--k"}), open_app(ctx, kb=kb) as app:
        if show_prompt:
            preview = app.build_prompt(request)
            return echo_json(preview) if as_json else _print_preview(preview)
        streaming = not as_json and sys.stdout.isatty()
        answer = app.ask(request, on_token=_show if streaming else None)
    if as_json:
        return echo_json(answer)
    typer.echo("" if streaming else answer.answer)
    if answer.citations:
        typer.echo("\nSources:")
        for c in answer.citations:
            where = c.label + (f" | {c.heading_path}" if c.heading_path else "")
            typer.echo(f"[{c.number}] {where}  ({c.chunk_id})")
    spent = answer.usage.described() if not answer.extractive else "no LLM"
    notes = [f"{answer.generator}" + (f" {answer.model}" if answer.model else ""), f"cache {answer.cache}", spent]
    if not answer.answered and not answer.sources:
        notes.append(
            f"evidence {answer.evidence:.2f} below answer_min_evidence {answer.min_evidence:.2f}: no source was sent"
        )
    if answer.invalid_citations:
        notes.append(f"{answer.invalid_citations} invalid citation(s) dropped")
    err.print("; ".join(notes))
    return None


def _print_preview(preview: PromptPreview) -> None:
    """The prompt `ask` would send; its token count against the window, and what was left out, on stderr."""
    typer.echo(preview.text)
    left = ", ".join(f"{n} by {why}" for why, n in sorted(preview.left_out.items())) or "none"
    err.print(
        f"{preview.prompt_tokens:,} prompt tokens ({preview.encoding}; stable prefix "
        f"{preview.system_tokens:,}) of {preview.window - preview.reserve:,} allowed "
        f"(context_window {preview.window:,} - answer_reserve {preview.reserve:,}); "
        f"{len(preview.sources)} sources, left out: {left}; nothing was sent"
    )


def _show(piece: str) -> None:
    """A streamed piece of the answer, as it comes."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command()(ask)
